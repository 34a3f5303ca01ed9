package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/redistest"
	"github.com/levee-go/levee/redislimit"
	"github.com/levee-go/levee/runlimit"
)

// fleetThenTurn is a chain of a fleet limit in direct mode
// (redislimit.NewGuard: one Redis round trip in its Admit), through a
// proxy that makes Redis slow, and a run limit that learned that its
// method's calls take base: protect.WithGuard(redislimit.NewGuard(...))
// beside the preset, on a transport that admits a call where it runs
// (httpguard, say).
func fleetThenTurn(t *testing.T, method string, base time.Duration) (*admission.Chain, *redistest.Proxy) {
	t.Helper()
	s := redistest.Start(t)
	p := redistest.NewProxy(t, s.Addr())
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	fleet, err := redislimit.New(client, "fleet", 1e6, 1000, redislimit.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	if r := fleet.Allow(context.Background(), ""); !r.Allowed { // loads the script, opens the connection
		t.Fatalf("the fleet limit's first call: %+v", r)
	}
	l, err := runlimit.New()
	if err != nil {
		t.Fatal(err)
	}
	f, now := l.Flow(method), time.Now()
	for range 20 { // calls of base, one at a time
		tk, ok := f.TryAcquire(now)
		if !ok {
			t.Fatal("no turn free for a call alone")
		}
		now = now.Add(base)
		tk.Done(now, false)
	}
	ch, err := admission.NewChain("r", []admission.Guard{redislimit.NewGuard("fleet", fleet, 0), runlimit.NewGuard("run", l)})
	if err != nil {
		t.Fatal(err)
	}
	return ch, p
}

// TestTurnJudgesTheDeadlineAfterAnAdmitThatBlocked: a call with 30ms left
// when the transport saw it, behind a 60ms round trip in the fleet
// limit's Admit, has none left when it asks the run limit for its turn,
// and its method takes 5ms: the turn refuses it as too late. The Admit
// marks Call.NowStale (admission.Traits.AdmitBlocks), so the turn is
// judged on the clock, not at Call.Now, at which the call would run
// past its deadline; and the transport reads the handler's start anew.
// (It failed so at 36e09ad; found by a review.)
func TestTurnJudgesTheDeadlineAfterAnAdmitThatBlocked(t *testing.T) {
	const method = "/s/Slow"
	ch, p := fleetThenTurn(t, method, 5*time.Millisecond)
	p.SetLatency(60 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	var c admission.Call
	c.Init(ctx, method, time.Now())
	var ps admission.Permits
	i, d := ch.Enter(&c, &ps)
	if i < 0 {
		ch.Finish(&c, &ps, admission.Outcome{})
	}
	if i != 1 || !d.DeadlineTooShort {
		t.Errorf("a call whose deadline passed during the fleet limit's round trip: Enter = %d %+v; want refused by the run limit's turn as too late", i, d)
	}
	if !c.NowStale {
		t.Error("Call.NowStale = false after a fleet limit's Admit, want true: the transport must read the handler's start anew")
	}
}
