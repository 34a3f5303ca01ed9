package sim

import (
	"math"
	"testing"
	"time"
)

// A client that sends bodies at most at ClientRate bounds what an
// unprotected server serves by that rate, however fast it could serve,
// and a call's body comes after the bodies before it: the last of n
// calls sent over d waits until n/ClientRate.
func TestClientRateSendsBodiesInOrder(t *testing.T) {
	sh := CPU
	sh.CPU = 100 * time.Microsecond // about 8,500 calls/s
	sh.ClientRate = 2000
	sh = steady(sh, 0.5, 2*time.Second)
	sh.Periodic = true
	r := mustRun(t, sh, Unprotected{}, 1)
	p := r.Phase(Spike)
	if p.Succeeded != p.Offered {
		t.Fatalf("served %d of %d calls, want all (no deadline)", p.Succeeded, p.Offered)
	}
	if got := r.Served[1]; math.Abs(float64(got)/sh.ClientRate-1) > 0.02 {
		t.Errorf("served %d calls in the second second, want the client's %.0f/s", got, sh.ClientRate)
	}
	last := time.Duration(float64(p.Offered)/sh.ClientRate*float64(time.Second)) - 2*time.Second
	if got := Quantile(p.Success, 1); math.Abs(float64(got-last)) > float64(5*time.Millisecond) {
		t.Errorf("slowest call %v, want about %v (the last body sent at %d/%.0f/s)", got, last, p.Offered, sh.ClientRate)
	}
}

// Below its rate, the client sends a body 1/ClientRate after its
// HEADERS: nothing else changes.
func TestClientRateAboveTheLoad(t *testing.T) {
	sh := steady(IO, 0.5, 2*time.Second)
	sh.Periodic = true
	base := mustRun(t, sh, Unprotected{}, 1).Phase(Spike)
	sh.ClientRate = 100 * sh.Capacity(false)
	slow := mustRun(t, sh, Unprotected{}, 1).Phase(Spike)
	gap := time.Duration(float64(time.Second) / sh.ClientRate)
	if slow.Succeeded != base.Succeeded {
		t.Fatalf("served %d calls, want %d as without the client's rate", slow.Succeeded, base.Succeeded)
	}
	for _, q := range []float64{0.5, 1} {
		if d := Quantile(slow.Success, q) - Quantile(base.Success, q); d < 0 || d > 2*gap {
			t.Errorf("latency quantile %v: %v later than a whole request's, want within [0, %v]", q, d, 2*gap)
		}
	}
}

// countStarts counts Start, and the calls started after their deadline.
type countStarts struct {
	Unprotected
	starts, late int
}

func (p *countStarts) Start(c *Call) Decision {
	p.starts++
	if c.Now.After(c.DeadlineTime()) {
		p.late++
	}
	return Decision{}
}

// A call whose deadline passes while its handler waits for its body
// ends there, as grpc-go's RecvMsg fails: the Protection's Start is
// never asked, for it or for a call whose deadline passed before its
// handler ran.
func TestBodyAfterTheDeadline(t *testing.T) {
	sh := CPU
	sh.CPU = 100 * time.Microsecond
	sh.ClientRate = 1000
	sh = steady(sh, 0.5, time.Second) // about 4,200 calls, bodies for 4.2s
	sh.Deadline = 500 * time.Millisecond
	p := &countStarts{}
	r := mustRun(t, sh, p, 1)
	ph := r.Phase(Spike)
	if ph.TimedOut == 0 || ph.Succeeded == 0 {
		t.Fatalf("succeeded %d, timed out %d: want both", ph.Succeeded, ph.TimedOut)
	}
	// Served: those whose body came in time, but one that ran into its
	// deadline.
	if p.late != 0 || p.starts < ph.Succeeded || p.starts > ph.Succeeded+1 {
		t.Errorf("Start asked %d times (%d after the call's deadline), want once for each of the %d calls served (one more at most) and never late", p.starts, p.late, ph.Succeeded)
	}
}
