package methodkind

import (
	"fmt"
	"sync"
	"testing"

	"github.com/levee-go/levee/decide"
)

// TestSetRemembersTheFirstKindUpToMax: a method's first kind noted stays;
// the set stops at Max methods, those noted first staying, and a method
// beyond it, like one never noted, is of unknown kind.
func TestSetRemembersTheFirstKindUpToMax(t *testing.T) {
	var s Set
	if k := s.Of("/s/M"); k != decide.UnknownKind {
		t.Fatalf("Of on the zero Set = %v, want %v", k, decide.UnknownKind)
	}
	s.Note("/s/M", decide.ServerStream)
	s.Note("/s/M", decide.Unary)
	if k := s.Of("/s/M"); k != decide.ServerStream {
		t.Errorf("Of after ServerStream then Unary = %v, want %v (the first)", k, decide.ServerStream)
	}
	for i := range 2 * Max {
		s.Note(fmt.Sprintf("/junk.Svc/M%d", i), decide.BidiStream)
	}
	if n := s.Len(); n != Max {
		t.Errorf("%d names noted: %d remembered, want Max (%d)", 2*Max, n, Max)
	}
	if k := s.Of("/junk.Svc/M0"); k != decide.BidiStream {
		t.Errorf("Of(the first junk name) = %v, want %v", k, decide.BidiStream)
	}
	if k := s.Of(fmt.Sprintf("/junk.Svc/M%d", Max)); k != decide.UnknownKind {
		t.Errorf("Of(a name beyond the cap) = %v, want %v", k, decide.UnknownKind)
	}
}

// TestSetConcurrentNotes: methods noted from many goroutines at once
// are all remembered (run under -race).
func TestSetConcurrentNotes(t *testing.T) {
	var s Set
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				m := fmt.Sprintf("/s/M%d", i)
				s.Note(m, decide.Unary)
				_ = s.Of(fmt.Sprintf("/s/M%d", (i+g)%50))
			}
		}()
	}
	wg.Wait()
	if n := s.Len(); n != 50 {
		t.Errorf("Len() = %d after 50 methods noted from 8 goroutines, want 50", n)
	}
}
