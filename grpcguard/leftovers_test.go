package grpcguard

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// TestLeftoversSteps: refusals counted by the second their deadline
// passes, at fixed instants.
func TestLeftoversSteps(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var l leftovers
	l.note(t0, time.Time{})                  // no deadline: nothing left
	l.note(t0, t0.Add(500*time.Millisecond)) // fires within second 1
	l.note(t0, t0.Add(30*time.Second))       // second 31
	l.note(t0, t0.Add(30*time.Second))       // second 31
	l.note(t0, t0.Add(time.Hour))            // capped at the last slot
	l.note(t0, t0.Add(-time.Second))         // already passed: at least the next second
	steps := []struct {
		at   time.Duration
		want int64
	}{{0, 5}, {time.Second, 3}, {30 * time.Second, 3}, {31 * time.Second, 1}, {(leftoverSlots - 1) * time.Second, 0}}
	for _, st := range steps {
		if got, total := l.pending(t0.Add(st.at)); got != st.want || total != 5 {
			t.Errorf("pending(t0+%v) = %d, %d; want %d, 5", st.at, got, total, st.want)
		}
	}
	// A slot reused a turn of the wheel later counts afresh.
	t1 := t0.Add(leftoverSlots * time.Second)
	l.note(t1, t1.Add(30*time.Second))
	if got, _ := l.pending(t1); got != 1 {
		t.Errorf("pending after a turn of the wheel = %d, want 1", got)
	}
}

// TestTapLeftoversCounted: a call refused in the tap with a deadline is
// pending until it; one refused in the interceptor is not counted.
func TestTapLeftoversCounted(t *testing.T) {
	s := mustServer(t, []decide.Rule{{Name: "all", Guards: []admission.Guard{alwaysRefuse{}}}})
	env := startServer(t, &testService{}, false, s.ServerOptions())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("EmptyCall = %v, want RESOURCE_EXHAUSTED", err)
	}
	now := time.Now()
	if got, total := s.TapLeftovers(now); got != 1 || total != 1 {
		t.Errorf("TapLeftovers(now) = %d, %d; want 1, 1", got, total)
	}
	if got, _ := s.TapLeftovers(now.Add(32 * time.Second)); got != 0 {
		t.Errorf("TapLeftovers(now+32s) = %d, want 0", got)
	}

	si := mustServer(t, []decide.Rule{{Name: "all", Guards: []admission.Guard{alwaysRefuse{}}}})
	envi := startServer(t, &testService{}, false, interceptorsOnly(si))
	if _, err := envi.client.EmptyCall(ctx, &testgrpc.Empty{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("EmptyCall = %v, want RESOURCE_EXHAUSTED", err)
	}
	if got, total := si.TapLeftovers(time.Now()); got != 0 || total != 0 {
		t.Errorf("interceptor refusal: TapLeftovers = %d, %d; want 0, 0", got, total)
	}
}
