package bulkhead_test

import (
	"context"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
)

// TestRunGuardCallerGoneIsNotAConcurrencyRefusal: a call whose caller
// gives up while it waits for its turn is refused with
// CauseCallerCanceled (CALLER_CANCELED), as runlimit's are, and not as a
// cap on calls in flight (CONCURRENCY_LIMITED, evidence "limit"): no limit
// refused it, and an operator reading the metric would look at the cap.
// A call refused because the queue is full keeps CauseConcurrencyLimited.
func TestRunGuardCallerGoneIsNotAConcurrencyRefusal(t *testing.T) {
	b, err := bulkhead.New(1, bulkhead.WithQueue(1))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := admission.NewChain("run", []admission.Guard{bulkhead.NewRunGuard("run", b, time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	held, ok := b.TryAcquire() // the turn is taken
	if !ok {
		t.Fatal("TryAcquire on an empty bulkhead refused")
	}
	defer held.Release()

	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		i int
		d admission.Decision
	}
	done := make(chan result, 1)
	go func() {
		var c admission.Call
		c.Init(ctx, "/svc/M", time.Now())
		var ps admission.Permits
		i, d := ch.Enter(&c, &ps)
		done <- result{i, d}
	}()
	for b.Waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	// The queue is full: a second call is refused for want of room.
	var c admission.Call
	c.Init(context.Background(), "/svc/M", time.Now())
	var ps admission.Permits
	if i, d := ch.Enter(&c, &ps); i != 0 || d.Cause != admission.CauseConcurrencyLimited {
		t.Errorf("call with the queue full: Enter = %d, cause %v; want refused with CauseConcurrencyLimited", i, d.Cause)
	}
	cancel()
	r := <-done
	if r.i != 0 || r.d.Cause != admission.CauseCallerCanceled || r.d.Evidence != admission.EvidenceNone {
		t.Errorf("caller canceled while queued: Enter = %d, cause %v, evidence %v; want refused with CauseCallerCanceled on no evidence",
			r.i, r.d.Cause, r.d.Evidence)
	}
	if got := b.InFlight(); got != 1 {
		t.Errorf("InFlight = %d after the canceled call, want 1 (the held turn)", got)
	}
}
