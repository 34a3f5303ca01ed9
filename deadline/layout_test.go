package deadline

import (
	"testing"
	"unsafe"
)

// TestMethodFillsACacheLine: a method's learned service time, written by
// every call of it, fills a cache line of 64 bytes (the allocator's size
// class of that size is aligned to it), so that two methods' calls on two
// processors do not share one (false sharing).
func TestMethodFillsACacheLine(t *testing.T) {
	if n := unsafe.Sizeof(method{}); n != 64 {
		t.Errorf("method is %d bytes, want 64", n)
	}
}
