package redislimit

import (
	"context"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
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

// TestLeasedDoneContextDecidesLocally: with leases, a one-token call whose
// context is already done and whose lease is dry is decided by the local
// fallback, as in direct mode, by AllowN and by a guard's Admit (given the
// Call's context); before, the caller refilled the lease from Redis.
func TestLeasedDoneContextDecidesLocally(t *testing.T) {
	s, c := single(t)
	l := mustNew(t, c, "leasedone", 100, 10, quiet, WithLeases(250*time.Millisecond, time.Second))
	settle(t, s, l)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	scripts := func() int { return s.CommandCalls("evalsha") + s.CommandCalls("eval") }
	if r := l.Allow(ctx, "k"); scripts() != 0 || !r.Local || !r.Allowed {
		t.Errorf("Allow with a done context and leases = %+v; Redis ran %d scripts, want 0 and allowed locally", r, scripts())
	}
	for _, scope := range []Scope{ByKey, ByKey | ByMethod} {
		s.Do("CONFIG", "RESETSTAT")
		g := NewGuard("fleet", l, scope)
		var call admission.Call
		call.Init(ctx, "/pkg.S/M", time.Now())
		call.Key = "other"
		if d := g.Admit(call); d.Refused || scripts() != 0 {
			t.Errorf("guard (scope %d) Admit with a done Call.Ctx = %+v; Redis ran %d scripts, want 0 (decided locally)", scope, d, scripts())
		}
	}
	if st := l.Stats(); st.LocalAllowed != 3 || st.Refills != 0 || st.Errors != 0 {
		t.Errorf("Stats = %+v, want LocalAllowed 3, no refill, no error", st)
	}
}
