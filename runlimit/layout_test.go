package runlimit

import (
	"testing"
	"unsafe"
)

// TestHotFieldsApart: what every call writes (the state word, a flow's
// counts, a lane's places) lies at least a cache line away from what
// every call reads (options, the epoch, a lane's flow and weight), so
// that processors running calls at once do not take each other's lines
// away (false sharing). A field moved across the padding breaks this.
func TestHotFieldsApart(t *testing.T) {
	var (
		ln Lane
		f  Flow
		l  Limiter
	)
	for _, c := range []struct {
		name          string
		readEnd, next uintptr // end of the field read, start of the field written after it
	}{
		{"Lane.weight..Lane.count", unsafe.Offsetof(ln.weight) + unsafe.Sizeof(ln.weight), unsafe.Offsetof(ln.count)},
		{"Flow.isUnserved..Flow.n", unsafe.Offsetof(f.isUnserved) + unsafe.Sizeof(f.isUnserved), unsafe.Offsetof(f.n)},
		{"Flow.lastOK..Flow.nx", unsafe.Offsetof(f.lastOK) + unsafe.Sizeof(f.lastOK), unsafe.Offsetof(f.nx)},
		{"Limiter.cpuNow..Limiter.state", unsafe.Offsetof(l.cpuNow) + unsafe.Sizeof(l.cpuNow), unsafe.Offsetof(l.state)},
		{"Limiter.state..Limiter.limit", unsafe.Offsetof(l.state) + unsafe.Sizeof(l.state), unsafe.Offsetof(l.limit)},
	} {
		if gap := c.next - c.readEnd; c.next < c.readEnd || gap < uintptr(cacheLine) {
			t.Errorf("%s: %d bytes apart, want at least %d", c.name, int(c.next)-int(c.readEnd), cacheLine)
		}
	}
	// The hot fields of a flow share one line's worth of bytes.
	if span := unsafe.Offsetof(f.lastOK) + unsafe.Sizeof(f.lastOK) - unsafe.Offsetof(f.n); span > uintptr(cacheLine) {
		t.Errorf("Flow's written fields span %d bytes, want at most %d", span, cacheLine)
	}
}
