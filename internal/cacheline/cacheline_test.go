package cacheline

import (
	"runtime"
	"testing"
)

func TestSize(t *testing.T) {
	if Size < 64 || Size&(Size-1) != 0 {
		t.Fatalf("Size = %d, want a power of two of at least 64", Size)
	}
	want := map[string]int{"amd64": 64, "386": 64, "arm64": 128, "ppc64": 128, "ppc64le": 128, "s390x": 256}
	if w, ok := want[runtime.GOARCH]; ok && Size != w {
		t.Errorf("Size = %d on %s, want %d", Size, runtime.GOARCH, w)
	}
}
