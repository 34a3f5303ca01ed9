package redislimit

import (
	"context"
	"testing"
	"time"
)

func TestDeadlinesShared(t *testing.T) {
	const timeout = time.Hour // one slice lasts 6 minutes: the test stays in the first
	d := newDeadlines(timeout)
	before := time.Now()
	a := d.get()
	b := d.get()
	if a != b {
		t.Fatal("two calls in the same slice got different contexts, want one shared")
	}
	dl, ok := a.Deadline()
	if !ok || dl.Before(before.Add(timeout*9/10)) || dl.After(time.Now().Add(timeout)) {
		t.Fatalf("deadline %v (ok %v), want between 0.9 and 1 timeout from now", dl, ok)
	}
	d.stop()
	if a.Err() == nil {
		t.Fatal("context still live after stop, want its timer released")
	}
	c := d.get()
	if c == a || c.Err() != nil {
		t.Fatalf("get after stop = the stopped context or a done one (%v), want a new live one", c.Err())
	}
	d.stop()
}

func TestDeadlinesSlices(t *testing.T) {
	d := newDeadlines(10 * time.Millisecond) // slices of 1 ms
	defer d.stop()
	a := d.get()
	time.Sleep(2 * time.Millisecond)
	if b := d.get(); b == a {
		t.Fatal("a call two slices later got the same context, want a new one")
	}
}

// TestDoneContextDecidesLocally: a caller that has given up gets the local
// answer without a round trip.
func TestDoneContextDecidesLocally(t *testing.T) {
	s, c := single(t)
	l := mustNew(t, c, "done", 100, 10, quiet)
	settle(t, s, l)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := l.Allow(ctx, "k"); !r.Local || !r.Allowed {
		t.Fatalf("Allow with a done context = %+v, want allowed locally", r)
	}
	if n := s.CommandCalls("evalsha"); n != 0 {
		t.Fatalf("Redis ran %d scripts for a caller that had given up, want 0", n)
	}
	if st := l.Stats(); st.Errors != 0 || st.Breaker.String() != "closed" {
		t.Fatalf("Stats = %+v, want no error and the breaker closed", st)
	}
}
