package runlimit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// errApp is an error of the application's (gRPC: UNIMPLEMENTED, say).
var errApp = errors.New("unimplemented")

// callOf is a unary call of method and tenant at now.
func callOf(method, tenant string, now time.Time) admission.Call {
	return admission.Call{Ctx: context.Background(), Method: method, Tenant: tenant, Now: now}
}

// serveCall admits, starts and finishes through g a unary call of method
// and tenant that ran for 2ms and ended with err, and returns the name
// of the flow it was admitted to.
func serveCall(t *testing.T, g admission.Guard, method, tenant string, err error) string {
	t.Helper()
	c := callOf(method, tenant, time.Now())
	d := g.Admit(c)
	if d.Refused {
		t.Fatalf("Admit(%s) refused: %+v", method, d)
	}
	flow := d.Permit.Ref.(*Lane).Flow().Name()
	d = g.(admission.Starter).Start(c, d.Permit)
	if d.Refused {
		t.Fatalf("Start(%s) refused: %+v", method, d)
	}
	g.Finish(c, d.Permit, admission.Outcome{Err: err, Duration: 2 * time.Millisecond})
	return flow
}

// flowNames are the names of the flows l tracks, sorted.
func flowNames(l *Limiter) []string {
	var names []string
	for _, f := range l.Flows() {
		names = append(names, f.Name())
	}
	slices.Sort(names)
	return names
}

// tracked returns the flow l tracks for name, or nil, without creating
// one.
func tracked(l *Limiter, name string) *Flow { return (*l.flows.Load())[name] }

// TestUnservedNamesTakeNoFlow: calls of names the server does not serve
// — admitted in the tap and abandoned (grpc-go answers UNIMPLEMENTED
// without a handler), or run and failed (a handler for unknown names) —
// share the flow UnservedFlow and leave no flow behind, however many
// names; a name the server serves then gets its own flow, from its first
// call that succeeds, and learns that call's service time. Before, 300
// names took the 256 flows for good and the served name was sent to the
// overflow flow.
func TestUnservedNamesTakeNoFlow(t *testing.T) {
	l := mustNew(t)
	g := NewGuard("run", l)
	for i := range 300 {
		c := callOf(fmt.Sprintf("/junk.Svc/M%d", i), "", time.Now())
		d := g.Admit(c)
		if d.Refused {
			t.Fatalf("Admit(%s) refused", c.Method)
		}
		if got := d.Permit.Ref.(*Lane).Flow().Name(); got != UnservedFlow {
			t.Fatalf("Admit(%s): flow %q, want %q", c.Method, got, UnservedFlow)
		}
		g.Finish(c, d.Permit, admission.Outcome{Skipped: true}) // abandoned: the stream ended
	}
	for i := range 300 {
		serveCall(t, g, fmt.Sprintf("/junk.Other/M%d", i), "", errApp)
	}
	if got := l.Stats(); got.Flows != 0 || len(l.Flows()) != 0 {
		t.Fatalf("after 600 unserved names: Stats().Flows = %d, Flows() = %v; want none", got.Flows, flowNames(l))
	}
	if st := l.unserved.ServiceTime(); st != 0 {
		t.Errorf("UnservedFlow learned a service time %v from failed calls, want none", st)
	}

	if got := serveCall(t, g, "/svc/Served", "", nil); got != UnservedFlow {
		t.Errorf("first call of /svc/Served admitted to flow %q, want %q (not served yet)", got, UnservedFlow)
	}
	f := tracked(l, "/svc/Served")
	if f == nil {
		t.Fatalf("after a call of /svc/Served succeeded: Flows() = %v, want it tracked", flowNames(l))
	}
	if st := f.ServiceTime(); st != 2*time.Millisecond {
		t.Errorf("/svc/Served's ServiceTime() = %v after its first call of 2ms, want 2ms", st)
	}
	if got := serveCall(t, g, "/svc/Served", "", nil); got != "/svc/Served" {
		t.Errorf("second call of /svc/Served admitted to flow %q, want its own", got)
	}
	if got := l.Flow("/svc/Served"); got != f {
		t.Errorf("Flow(/svc/Served) = %q, want the flow the guard made", got.Name())
	}
	if st := l.unserved.ServiceTime(); st != 0 {
		t.Errorf("UnservedFlow learned a service time %v, want none", st)
	}
}

// TestServedStreamGetsItsFlow: a server stream of a name not served yet
// runs in UnservedFlow; when it ends well, the name gets its flow, which
// learns the stream's time and counts it as a short stream.
func TestServedStreamGetsItsFlow(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Hour))
	g := NewGuard("run", l)
	c, p, d := startStream(t, g, "/s/Feed", false)
	if d.Refused {
		t.Fatalf("Start(stream) refused: %+v", d)
	}
	st, ok := p.Ref.(*streamTurn)
	if !ok || st.t.f != l.unserved {
		t.Fatalf("stream's permit %+v, want a turn in UnservedFlow", p)
	}
	time.Sleep(time.Millisecond)
	g.Finish(c, p, admission.Outcome{})
	f := tracked(l, "/s/Feed")
	if f == nil {
		t.Fatal("after a stream of /s/Feed ended well: no flow of its own")
	}
	if f.ServiceTime() < time.Millisecond || f.streamScore.Load() != -1 {
		t.Errorf("/s/Feed: ServiceTime() = %v, streamScore %d; want the stream's time and -1", f.ServiceTime(), f.streamScore.Load())
	}
	if l.Running() != 0 || l.unserved.calls.Load() != 0 {
		t.Errorf("after the stream: Running() = %d, UnservedFlow's calls %d; want 0 and 0", l.Running(), l.unserved.calls.Load())
	}
}

// TestFlowsAtTheCap: at WithMaxFlows, a newly served name takes the place
// of the least recently used flow among those with no call in them and
// unused in the current interval; a flow with a call in it, or used in
// the interval, is never forgotten. With none to forget the name's calls
// stay in UnservedFlow, and Flow returns OverflowFlow. A forgotten flow's
// tenants are no longer counted.
func TestFlowsAtTheCap(t *testing.T) {
	l := mustNew(t, WithMaxFlows(3))
	g := NewGuard("run", l)
	interval := func(i int64) { l.openedAt.Store(i * int64(time.Second)) } // as update does
	interval(1)
	serveCall(t, g, "/s/A", "acme", nil)
	interval(2)
	serveCall(t, g, "/s/B", "", nil)
	interval(3)
	serveCall(t, g, "/s/C", "", nil)
	if got := flowNames(l); !slices.Equal(got, []string{"/s/A", "/s/B", "/s/C"}) {
		t.Fatalf("Flows() = %v, want A, B, C", got)
	}
	if n := l.Tenants(); n != 0 {
		t.Fatalf("Tenants() = %d, want 0 (acme's one call of /s/A ran in UnservedFlow, which keeps no tenant apart)", n)
	}

	interval(4)
	// A call of A waits for its handler: A has a call in it.
	held := callOf("/s/A", "acme", time.Now())
	hd := g.Admit(held)
	serveCall(t, g, "/s/D", "", nil)
	serveCall(t, g, "/s/D", "", nil)
	if got := flowNames(l); !slices.Equal(got, []string{"/s/A", "/s/C", "/s/D"}) {
		t.Errorf("D served with A busy: Flows() = %v, want A, C, D (B, the least recently used idle flow, forgotten)", got)
	}
	g.Finish(held, hd.Permit, admission.Outcome{Skipped: true})
	if n := l.Tenants(); n != 1 {
		t.Errorf("Tenants() = %d, want 1 (acme in /s/A)", n)
	}

	interval(5)
	serveCall(t, g, "/s/C", "", nil) // C and D used in this interval
	serveCall(t, g, "/s/D", "", nil)
	serveCall(t, g, "/s/E", "", nil)
	if got := flowNames(l); !slices.Equal(got, []string{"/s/C", "/s/D", "/s/E"}) {
		t.Errorf("E served: Flows() = %v, want C, D, E (A, idle since interval 4, forgotten)", got)
	}
	if n := l.Tenants(); n != 0 {
		t.Errorf("Tenants() = %d after A was forgotten, want 0", n)
	}
	// Every flow used in this interval: none to forget.
	if got := serveCall(t, g, "/s/F", "", nil); got != UnservedFlow {
		t.Errorf("F admitted to %q, want %q", got, UnservedFlow)
	}
	if got := serveCall(t, g, "/s/F", "", nil); got != UnservedFlow {
		t.Errorf("F served, no flow to forget: admitted to %q next, want %q", got, UnservedFlow)
	}
	if got := l.Flow("/s/F").Name(); got != OverflowFlow {
		t.Errorf("Flow(/s/F) at the cap, no flow to forget: %q, want %q", got, OverflowFlow)
	}
	if st := l.Stats(); st.Flows != 3 || st.Forgotten != 2 {
		t.Errorf("Stats(): Flows %d, Forgotten %d; want 3 and 2", st.Flows, st.Forgotten)
	}

	interval(6)
	serveCall(t, g, "/s/F", "", nil)
	if tracked(l, "/s/F") == nil {
		t.Errorf("F served in a new interval: Flows() = %v, want F tracked", flowNames(l))
	}
}

// TestManyNamesStayBounded: 100,000 distinct names, each with a tenant of
// its own, admitted and abandoned or run and failed, leave the Limiter's
// tables as they were (no flow, no tenant), and its memory too.
func TestManyNamesStayBounded(t *testing.T) {
	l := mustNew(t)
	g := NewGuard("run", l)
	serveCall(t, g, "/svc/Served", "acme", nil)
	before := heapAfterGC()
	for i := range 100_000 {
		name := fmt.Sprintf("/junk.Svc/M%d", i)
		tenant := fmt.Sprintf("t%d", i)
		if i%2 == 0 {
			c := callOf(name, tenant, time.Now())
			d := g.Admit(c)
			g.Finish(c, d.Permit, admission.Outcome{Skipped: true})
			continue
		}
		serveCall(t, g, name, tenant, errApp)
	}
	grown := int64(heapAfterGC()) - int64(before)
	st := l.Stats()
	t.Logf("after 100,000 names: %d flows, %d tenants, heap grown by %d bytes", st.Flows, l.Tenants(), grown)
	if st.Flows != 1 {
		t.Errorf("Stats().Flows = %d, want 1 (/svc/Served)", st.Flows)
	}
	if n := l.Tenants(); n != 0 {
		t.Errorf("Tenants() = %d, want 0", n)
	}
	if grown > 256<<10 {
		t.Errorf("heap grew by %d bytes over 100,000 names, want at most 256 KiB", grown)
	}
}

// heapAfterGC is the heap's live bytes after a collection.
func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
