package grpcguard

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/clock/clocktest"
)

// refuseAll refuses every call and counts the attempts it saw.
type refuseAll struct{ attempts atomic.Int64 }

func (g *refuseAll) Name() string { return "full" }
func (g *refuseAll) Admit(admission.Call) admission.Decision {
	g.attempts.Add(1)
	return admission.Refuse("no room", 50*time.Millisecond)
}
func (g *refuseAll) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// TestSustainedOverloadStopsRetries: a grpc-go client whose retry policy
// retries RESOURCE_EXHAUSTED up to 3 attempts retries the tap's refusals
// while they are occasional (the tap can set no trailer), and stops once
// they are sustained: the interceptor then refuses with the same status,
// RetryInfo, and a pushback of -1.
func TestSustainedOverloadStopsRetries(t *testing.T) {
	g := &refuseAll{}
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{g}}})
	clk := clocktest.New(time.Now())
	s.clock.Fake = clk.Now
	const retry = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
	  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
	    "backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`
	env := startServer(t, &testService{}, true, s.ServerOptions(), grpc.WithDefaultServiceConfig(retry))
	call := func() (int64, error) {
		before := g.attempts.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := env.client.EmptyCall(ctx, &testgrpc.Empty{})
		return g.attempts.Load() - before, err
	}
	// Occasional refusals, 300ms apart: each call is tried 3 times.
	for i := range 3 {
		n, err := call()
		// grpc-go returns the error of sending the request when its last
		// attempt is refused in the tap before the request was sent
		// ("max retries exhausted: failed after 3 attempts: EOF", code
		// UNKNOWN); otherwise the refusal's status.
		if status.Code(err) != codes.ResourceExhausted && !(err != nil && strings.Contains(err.Error(), "max retries exhausted")) {
			t.Fatalf("call %d: %v, want RESOURCE_EXHAUSTED", i, err)
		}
		if n != 3 {
			t.Errorf("occasional refusal %d: %d attempts, want 3 (the tap's refusal has no pushback)", i, n)
		}
		clk.Advance(300 * time.Millisecond)
	}
	// Refusals every 100ms for 1s: sustained.
	for range 11 {
		_, _ = call()
		clk.Advance(100 * time.Millisecond)
	}
	for i := range 5 {
		n, err := call()
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("sustained call %d: %v, want RESOURCE_EXHAUSTED", i, err)
		}
		if d, ok := retryInfo(t, err); !ok || d != 50*time.Millisecond {
			t.Errorf("sustained call %d: RetryInfo %v, %t; want 50ms", i, d, ok)
		}
		if n != 1 {
			t.Errorf("sustained call %d: %d attempts, want 1 (pushback -1)", i, n)
		}
		clk.Advance(100 * time.Millisecond)
	}
	if st := s.Stats(); len(st) != 1 || st[0].Refused != uint64(g.attempts.Load()) {
		t.Errorf("Stats() = %+v, want every one of %d attempts counted refused once", st, g.attempts.Load())
	}
}

// TestSustainedOverloadKeepsTapRefusalsForClientsThatDoNotRetry: under
// sustained overload a client that never sent a retry attempt is still
// refused in the tap (no pushback trailer, which only the interceptor can
// set); one whose connection sent a retry attempt gets pushback -1.
func TestSustainedOverloadKeepsTapRefusalsForClientsThatDoNotRetry(t *testing.T) {
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{&refuseAll{}}}})
	clk := clocktest.New(time.Now())
	s.clock.Fake = clk.Now
	plain := startServer(t, &testService{}, true, s.ServerOptions())
	pushback := func(env *testEnv, md metadata.MD) []string {
		var tr metadata.MD
		ctx := metadata.NewOutgoingContext(context.Background(), md)
		_, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}, grpc.Trailer(&tr))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("EmptyCall: %v, want RESOURCE_EXHAUSTED", err)
		}
		return tr.Get(PushbackTrailer)
	}
	for range 12 { // 1.2s of refusals, 100ms apart: sustained
		pushback(plain, nil)
		clk.Advance(100 * time.Millisecond)
	}
	if got := pushback(plain, nil); len(got) != 0 {
		t.Errorf("sustained refusal of a client that never retried: pushback %q, want none (refused in the tap)", got)
	}
	// A retry attempt, as grpc-go marks one, on the same connection: from
	// then on its refusals carry -1.
	if got := pushback(plain, metadata.Pairs(decide.PreviousAttemptsHeader, "1")); len(got) != 1 || got[0] != "-1" {
		t.Errorf("sustained refusal of a retry attempt: pushback %q, want [-1]", got)
	}
	if got := pushback(plain, nil); len(got) != 1 || got[0] != "-1" {
		t.Errorf("sustained refusal of a first attempt on a connection that retries: pushback %q, want [-1]", got)
	}
}
