package redislimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/httpguard"
	"github.com/levee-go/levee/internal/guardtest"
	"github.com/levee-go/levee/internal/redistest"
	"github.com/levee-go/levee/redislimit"
	"github.com/levee-go/levee/runlimit"
)

// durations is a timed guard (no Starter) that records the outcomes'
// Durations.
type durations struct {
	mu sync.Mutex
	d  []time.Duration
}

func (g *durations) Name() string                            { return "durations" }
func (g *durations) Traits() admission.Traits                { return admission.Traits{Cost: admission.CostDeadline} }
func (g *durations) Admit(admission.Call) admission.Decision { return admission.Decision{} }
func (g *durations) Finish(_ admission.Call, _ admission.Permit, o admission.Outcome) {
	g.mu.Lock()
	g.d = append(g.d, o.Duration)
	g.mu.Unlock()
}

// fleetAndRunLimit is a Guard on one rule: a fleet limit in direct mode
// (redislimit.NewGuard: one Redis round trip in its Admit) through a
// proxy that makes Redis slow, and a run limit that learned that flow's
// calls take base; as protect.WithGuard(redislimit.NewGuard(...)) beside
// the preset.
func fleetAndRunLimit(t *testing.T, flow string, base time.Duration, extra ...admission.Guard) (*httpguard.Guard, *redistest.Proxy) {
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
	f, now := l.Flow(flow), time.Now()
	for range 20 { // calls of base, one at a time
		tk, ok := f.TryAcquire(now)
		if !ok {
			t.Fatal("no turn free for a call alone")
		}
		now = now.Add(base)
		tk.Done(now, false)
	}
	guards := append([]admission.Guard{redislimit.NewGuard("fleet", fleet, 0), runlimit.NewGuard("run", l)}, extra...)
	hg, err := httpguard.New(guardtest.Engine(t, decide.Rule{Name: "r", Guards: guards}), httpguard.WithFlow(func(*http.Request) string { return flow }))
	if err != nil {
		t.Fatal(err)
	}
	return hg, p
}

// TestTurnJudgesTheDeadlineAfterAnAdmitThatBlocked: a fleet limit in
// direct mode makes a Redis round trip in its Admit. A request with 30ms
// left when it arrives, behind a 60ms round trip, has none left when it
// asks the run limit for its turn, and its method takes 5ms: the run
// limit refuses it as too late (504), as it did when it judged the
// deadline on the clock. Judged at Call.Now, the instant the transport
// saw the request, it runs its handler past its deadline.
func TestTurnJudgesTheDeadlineAfterAnAdmitThatBlocked(t *testing.T) {
	hg, p := fleetAndRunLimit(t, "/slow", 5*time.Millisecond)
	p.SetLatency(60 * time.Millisecond)
	ran := false
	h := hg.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	if ran || w.Code != http.StatusGatewayTimeout {
		t.Errorf("a request whose deadline passed during the fleet limit's round trip: handler ran %t, status %d; want refused, %d", ran, w.Code, http.StatusGatewayTimeout)
	}
}

// TestDurationExcludesAnAdmitThatBlocked: with a Starter in the rule, the
// handler's Duration is measured from its start, after the guards: a
// 60ms round trip of the fleet limit's Admit is not the method's service
// time (a deadline guard would learn it, and refuse short deadlines of a
// method that takes microseconds).
func TestDurationExcludesAnAdmitThatBlocked(t *testing.T) {
	rec := new(durations)
	hg, p := fleetAndRunLimit(t, "/fast", 50*time.Microsecond, rec)
	p.SetLatency(60 * time.Millisecond)
	h := hg.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if n := len(rec.d); n != 1 {
		t.Fatalf("%d outcomes, want 1", n)
	}
	if d := rec.d[0]; d >= 30*time.Millisecond {
		t.Errorf("Duration of a handler that does nothing, behind a 60ms round trip in Admit: %v, want well under 30ms", d)
	}
}
