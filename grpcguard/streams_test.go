package grpcguard

import (
	"fmt"
	"testing"
)

// TestStreamKindsBounded: the methods remembered as streams stop at
// maxStreamKinds, whatever names the stream interceptor sees (with a
// handler for unknown services it sees every name a client sends); those
// remembered first stay. Before, each new name copied the whole set: a
// flood of 50,000 names took minutes of CPU and kept every name.
func TestStreamKindsBounded(t *testing.T) {
	s := newStreams(0, 0)
	for i := range 5 * maxStreamKinds {
		s.noteStream(fmt.Sprintf("/junk.Svc/M%d", i))
	}
	if n := len(*s.kinds.Load()); n != maxStreamKinds {
		t.Errorf("%d names seen as streams: %d remembered, want maxStreamKinds (%d)", 5*maxStreamKinds, n, maxStreamKinds)
	}
	if !s.isStream("/junk.Svc/M0") || s.isStream(fmt.Sprintf("/junk.Svc/M%d", maxStreamKinds)) {
		t.Error("isStream: want the first names remembered, not those beyond the cap")
	}
}
