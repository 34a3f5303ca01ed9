package grpcguard

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/clock/clocktest"
)

func TestSustainedRefusals(t *testing.T) {
	t0 := time.Unix(1000, 0)
	plain := admission.Refuse("full", time.Second)
	late := admission.Decision{Refused: true, DeadlineTooShort: true}
	const a, gap = SustainedAfter, SustainedGap
	step := gap * 4 / 5 // refusals closer together than the gap
	steps := []struct {
		name string
		at   time.Duration
		give admission.Decision
		want bool
	}{
		{"first refusal", 0, plain, false},
		{"one step on", step, plain, false},
		{"two steps on", 2 * step, plain, false},
		{"just before SustainedAfter", a - time.Millisecond, plain, false},
		{"SustainedAfter on: sustained", a, plain, true},
		{"deadline refusal while sustained", a + step/2, late, false},
		{"still sustained", a + step, plain, true},
		{"after a pause longer than the gap: a new run", a + step + gap + time.Millisecond, plain, false},
		{"a long pause again", a + step + 3*gap, plain, false},
		{"one step into the run", a + step + 3*gap + step, plain, false},
	}
	var s sustained
	for _, st := range steps {
		if got := s.refused(t0.Add(st.at), st.give); got != st.want {
			t.Errorf("%s: refused(t0+%v) = %t, want %t", st.name, st.at, got, st.want)
		}
	}
}

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
	s := mustServer(t, []Rule{{Guards: []admission.Guard{g}}})
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
	s := mustServer(t, []Rule{{Guards: []admission.Guard{&refuseAll{}}}})
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
	if got := pushback(plain, metadata.Pairs(PreviousAttemptsHeader, "1")); len(got) != 1 || got[0] != "-1" {
		t.Errorf("sustained refusal of a retry attempt: pushback %q, want [-1]", got)
	}
	if got := pushback(plain, nil); len(got) != 1 || got[0] != "-1" {
		t.Errorf("sustained refusal of a first attempt on a connection that retries: pushback %q, want [-1]", got)
	}
}

func TestRetryingIsBounded(t *testing.T) {
	var r retrying
	t0 := time.Unix(1000, 0)
	retry := metadata.Pairs(PreviousAttemptsHeader, "1")
	for i := range 3 * maxRetrying {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, byte(i>>8), byte(i)), Port: 1000 + i}})
		if !r.note(ctx, retry, t0.Add(time.Duration(i))) {
			t.Fatalf("note(retry attempt %d) = false, want true", i)
		}
	}
	if n := len(r.seen); n > maxRetrying {
		t.Errorf("%d connections remembered, want at most %d", n, maxRetrying)
	}
	n := 3*maxRetrying - 1
	last := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, byte(n>>8), byte(n)), Port: 1000 + n}})
	if !r.note(last, nil, t0) {
		t.Error("the latest retrying connection was forgotten")
	}
}
