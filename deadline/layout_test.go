package deadline

import (
	"testing"
	"unsafe"

	"github.com/levee-go/levee/internal/cacheline"
)

// TestMethodFillsACacheLine: a method's learned service time, written by
// every call of it, fills a cache line (64 bytes on amd64, 128 on arm64;
// the allocator's size classes of those sizes are aligned to them), so that two methods' calls on two
// processors do not share one (false sharing).
func TestMethodFillsACacheLine(t *testing.T) {
	if n := unsafe.Sizeof(method{}); n != uintptr(cacheline.Size) {
		t.Errorf("method is %d bytes, want %d", n, cacheline.Size)
	}
}
