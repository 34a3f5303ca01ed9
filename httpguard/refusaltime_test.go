package httpguard

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// turnGuard refuses every call at its Start, as a full run limit does; a
// call keyed "slow" first waits until release is closed, as a wait for a
// turn that runs out does.
type turnGuard struct{ entered, release chan struct{} }

func (*turnGuard) Name() string                                               { return "run" }
func (*turnGuard) Admit(admission.Call) admission.Decision                    { return admission.Decision{} }
func (*turnGuard) Finish(admission.Call, admission.Permit, admission.Outcome) {}
func (g *turnGuard) Start(c admission.Call, _ admission.Permit) admission.Decision {
	cause := admission.CauseRunQueueFull
	if c.Key == "slow" {
		close(g.entered)
		<-g.release
		cause = admission.CauseRunWaitExpired
	}
	return admission.RefuseFor(cause, admission.EvidenceStanding, "full", 100*time.Millisecond)
}

// TestRefusalAfterAWaitIsStampedWhenDecided: a call that arrives at
// 600ms and is refused at 1s, after its wait, is recorded at 1s (the
// observer's RefusalEvent.Time, and the run of refusals that makes them
// sustained). Stamped at its arrival, it pulled the run's latest refusal
// back by 400ms, and the next refusal read the gap as a pause: refusals
// every 10ms from 0 to 1.01s never became sustained.
func TestRefusalAfterAWaitIsStampedWhenDecided(t *testing.T) {
	tg := &turnGuard{make(chan struct{}), make(chan struct{})}
	e, err := decide.New([]decide.Rule{{Guards: []admission.Guard{tg}, Key: decide.HeaderKey("x-kind")}})
	if err != nil {
		t.Fatal(err)
	}
	epoch := time.Unix(1000, 0)
	var slowAt atomic.Int64
	e.SetObserver(decide.Observer{RefusalsPerSecond: -1, OnRefusal: func(ev decide.RefusalEvent) {
		if ev.Cause == decide.ReasonRunWaitExpired {
			slowAt.Store(int64(ev.Time.Sub(epoch)))
		}
	}})
	hg, err := New(e)
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	hg.clock.Fake = func() time.Time { return epoch.Add(time.Duration(now.Load())) }
	h := hg.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	reason := func(kind string) string {
		req := httptest.NewRequest("POST", "/", nil)
		req.Header.Set("X-Kind", kind)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Body.String()
	}
	tick := func() { now.Add(int64(10 * time.Millisecond)) }
	for ; now.Load() < int64(600*time.Millisecond); tick() {
		reason("fast")
	}
	done := make(chan struct{})
	go func() { defer close(done); reason("slow") }() // arrives at 600ms, waits
	<-tg.entered
	for ; now.Load() < int64(time.Second); tick() {
		reason("fast")
	}
	close(tg.release)
	<-done // refused at 1s
	tick()
	if b := reason("fast"); !strings.Contains(b, string(decide.ReasonSustainedOverload)) {
		t.Errorf("refusals every 10ms for 1.01s, yet the last says %s; want %s", b, decide.ReasonSustainedOverload)
	}
	if at := time.Duration(slowAt.Load()); at != time.Second {
		t.Errorf("refused at 1s after its wait; RefusalEvent.Time says %v", at)
	}
}
