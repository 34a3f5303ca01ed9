package grpcguard_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/ratelimit"
)

// naiveRetries is the retry loop of an unprotected hop: up to 3 attempts
// when the server answers RESOURCE_EXHAUSTED or UNAVAILABLE, 5ms apart,
// as a retry policy in a service config would make them (grpc-go's own
// policy does the same, but under the race detector its retries of
// early-aborted calls stall on this loaded machine, so the loop is the
// interceptor's).
func naiveRetries(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var err error
	for range 3 {
		err = invoker(ctx, method, req, reply, cc, opts...)
		if c := status.Code(err); c != codes.ResourceExhausted && c != codes.Unavailable {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(5 * time.Millisecond):
		}
	}
	return err
}

// hop is a TestService served over loopback TCP behind a levee Server,
// counting the attempts that reach it (before levee decides on them).
type hop struct {
	testgrpc.UnimplementedTestServiceServer
	attempts atomic.Int64
	addr     string
	gs       *grpc.Server
	served   chan struct{}
	// call, if not nil, is what EmptyCall does: the front's call to its
	// downstream.
	call func(ctx context.Context) error
}

func (h *hop) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	if h.call != nil {
		if err := h.call(ctx); err != nil {
			return nil, err
		}
	}
	return &testgrpc.Empty{}, nil
}

// serveHop serves h behind a levee Server with guards, or unguarded if
// there are none.
func serveHop(t *testing.T, h *hop, guards ...admission.Guard) {
	t.Helper()
	count := func(ctx context.Context, _ *tap.Info) (context.Context, error) {
		h.attempts.Add(1)
		return ctx, nil
	}
	var opts []grpc.ServerOption
	if len(guards) > 0 {
		srv, err := grpcguard.New([]decide.Rule{{Guards: guards}})
		if err != nil {
			t.Fatal(err)
		}
		count = func(ctx context.Context, info *tap.Info) (context.Context, error) {
			h.attempts.Add(1)
			return srv.TapHandle(ctx, info)
		}
		opts = append(opts, grpc.ChainUnaryInterceptor(srv.UnaryServerInterceptor()))
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr, h.served = lis.Addr().String(), make(chan struct{})
	h.gs = grpc.NewServer(append(opts, grpc.InTapHandle(count))...)
	testgrpc.RegisterTestServiceServer(h.gs, h)
	go func() {
		defer close(h.served)
		_ = h.gs.Serve(lis)
	}()
}

func (h *hop) stop() {
	h.gs.Stop()
	<-h.served
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// chainFigures are the attempts counted in one run of a chain.
type chainFigures struct {
	calls, front, inventory, ok int64
	target                      string // the inventory, as the front's ClientConn names it
}

// runChain drives calls calls at rate per second from a caller (through
// callerOpts) into front → inventory and counts the attempts reaching
// each. The inventory, whatever the chain, is served behind a levee
// Server that admits a tenth of rate (bursts of 5): its capacity. With
// protected the front is served behind a levee Server too (admitting
// everything: it is not the bottleneck) and answers a failed downstream
// call with UpstreamOverloaded; otherwise the front is a plain gRPC
// server that passes the downstream's error on as it is.
func runChain(t *testing.T, calls int, rate float64, callerOpts, frontOpts []grpc.DialOption, protected bool) chainFigures {
	t.Helper()
	invLimit, err := ratelimit.NewLimiter(ratelimit.Limit(rate/10), 5)
	if err != nil {
		t.Fatal(err)
	}
	inventory := &hop{}
	serveHop(t, inventory, ratelimit.NewGuard("inventory", invLimit))
	defer inventory.stop()

	invConn := dial(t, inventory.addr, frontOpts...)
	defer invConn.Close()
	invClient := testgrpc.NewTestServiceClient(invConn)
	front := &hop{call: func(ctx context.Context) error {
		_, err := invClient.EmptyCall(ctx, &testgrpc.Empty{})
		if protected {
			return grpcguard.UpstreamOverloaded(ctx, err)
		}
		return err
	}}
	if protected {
		frontLimit, err := ratelimit.NewLimiter(ratelimit.Inf, 1)
		if err != nil {
			t.Fatal(err)
		}
		serveHop(t, front, ratelimit.NewGuard("front", frontLimit))
	} else {
		serveHop(t, front)
	}
	defer front.stop()

	frontConn := dial(t, front.addr, callerOpts...)
	defer frontConn.Close()
	caller := testgrpc.NewTestServiceClient(frontConn)
	// Connect both hops before the spike.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := caller.EmptyCall(ctx, &testgrpc.Empty{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("warm-up call = %v", err)
	}
	time.Sleep(100 * time.Millisecond) // the inventory's bucket refills
	front.attempts.Store(0)
	inventory.attempts.Store(0)

	var ok atomic.Int64
	var codesMu sync.Mutex
	codesSeen := map[string]int{}
	defer func() { t.Logf("errors: %v", codesSeen) }()
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := range calls {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A deadline long enough that the naive retries run their
			// course even when the race detector and a busy machine slow
			// the process down.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := caller.EmptyCall(ctx, &testgrpc.Empty{})
			if err == nil {
				ok.Add(1)
			}
			codesMu.Lock()
			codesSeen[status.Convert(err).Code().String()+" "+firstWords(status.Convert(err).Message())]++
			codesMu.Unlock()
		}()
	}
	wg.Wait()
	return chainFigures{calls: int64(calls), front: front.attempts.Load(), inventory: inventory.attempts.Load(), ok: ok.Load(), target: invConn.Target()}
}

// TestChainNoRetryAmplification: a spike of 10× the inventory's capacity
// through a chain caller → front → inventory. With levee at both hops —
// retries (3 attempts) within a budget, the front answering "overloaded,
// don't retry" when the inventory refuses it — the attempts reaching the
// inventory stay within 1.1× the front's incoming calls, and the caller
// does not retry. With naive retries (3 attempts) at both hops and the
// front passing the inventory's refusal on, they multiply.
func TestChainNoRetryAmplification(t *testing.T) {
	const calls, rate = 200, 200.0
	newClient := func(opts ...grpcguard.ClientOption) *grpcguard.Client {
		c, err := grpcguard.NewClient(append(opts, grpcguard.WithRetries(3))...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The caller's guard has no breaker or throttle, so that it sends
	// every call and the front's attempts count its retries; the front's
	// has the defaults (hold-off, throttle, breaker) and a retry budget of
	// 10% of the last 10 seconds.
	callerGuard := newClient(grpcguard.WithBreaker(nil), grpcguard.WithThrottle(nil))
	frontGuard := newClient()
	levee := runChain(t, calls, rate,
		append(callerGuard.DialOptions(), grpc.WithDisableRetry()),
		append(frontGuard.DialOptions(), grpc.WithDisableRetry()), true)
	// The budget alone: the front's guard neither holds off nor throttles
	// nor breaks, so every call is sent and only the budget stops retries.
	budgetGuard := newClient(grpcguard.WithBreaker(nil), grpcguard.WithThrottle(nil), grpcguard.WithMaxHoldOff(0))
	budgetOnly := runChain(t, calls, rate,
		append(newClient(grpcguard.WithBreaker(nil), grpcguard.WithThrottle(nil)).DialOptions(), grpc.WithDisableRetry()),
		append(budgetGuard.DialOptions(), grpc.WithDisableRetry()), true)
	naive := runChain(t, calls, rate,
		[]grpc.DialOption{grpc.WithUnaryInterceptor(naiveRetries), grpc.WithDisableRetry()},
		[]grpc.DialOption{grpc.WithUnaryInterceptor(naiveRetries), grpc.WithDisableRetry()}, false)

	ratio := func(a, b int64) float64 { return float64(a) / float64(b) }
	for _, r := range []struct {
		name string
		f    chainFigures
	}{{"levee", levee}, {"levee, budget only", budgetOnly}, {"naive retries", naive}} {
		t.Logf("%-22s %d calls: front received %d attempts (%.2f×), inventory %d (%.2f× the front's, %.2f× the calls); %d succeeded",
			r.name, r.f.calls, r.f.front, ratio(r.f.front, r.f.calls), r.f.inventory, ratio(r.f.inventory, r.f.front), ratio(r.f.inventory, r.f.calls), r.f.ok)
	}
	if b := frontGuard.RetryBudget(levee.target); b != nil {
		s := b.Snapshot()
		t.Logf("levee: the front's retry budget granted %d retries and refused %d", s.Granted, s.Refused)
	}
	if b := budgetGuard.RetryBudget(budgetOnly.target); b != nil {
		s := b.Snapshot()
		t.Logf("levee, budget only: the front's retry budget granted %d retries and refused %d", s.Granted, s.Refused)
	}
	for _, r := range []struct {
		name string
		f    chainFigures
	}{{"levee", levee}, {"levee, budget only", budgetOnly}} {
		if r.f.front != calls {
			t.Errorf("%s: the front received %d attempts of %d calls, want exactly one each: the caller must not retry \"overloaded, don't retry\"", r.name, r.f.front, calls)
		}
		if ratio(r.f.inventory, r.f.front) > 1.1 {
			t.Errorf("%s: the inventory received %d attempts for the front's %d calls, %.2f×, want at most 1.1×", r.name, r.f.inventory, r.f.front, ratio(r.f.inventory, r.f.front))
		}
	}
	// The budget is what stops the retries when nothing else does: some
	// are made, up to the 10% it allows.
	if budgetOnly.inventory <= budgetOnly.front {
		t.Errorf("levee, budget only: the inventory received %d attempts for %d calls, want some retries", budgetOnly.inventory, budgetOnly.front)
	}
	// Up to 9 attempts per call; under a busy machine's delays at least
	// half again as many as the calls.
	if ratio(naive.inventory, naive.calls) < 1.5 {
		t.Errorf("naive: the inventory received %d attempts for %d calls, want them multiplied (at least 1.5×): is the inventory overloaded?", naive.inventory, naive.calls)
	}
}

func firstWords(s string) string {
	if len(s) > 60 {
		return s[:60]
	}
	return s
}

// grpcRetryPolicy is grpc-go's own retry policy, 3 attempts on the
// overload codes.
const grpcRetryPolicy = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "retryPolicy": {
	"maxAttempts": 3, "initialBackoff": "0.005s", "maxBackoff": "0.02s", "backoffMultiplier": 2,
	"retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]}}]}`

// TestUpstreamOverloadedOverGRPC: a front whose downstream refused it
// answers "overloaded, don't retry"; neither levee's client with retries
// nor grpc-go's retry policy (which reads the -1 pushback trailer) sends
// the call again, while both retry a plain UNAVAILABLE.
func TestUpstreamOverloadedOverGRPC(t *testing.T) {
	var answer atomic.Pointer[error]
	front := &hop{call: func(ctx context.Context) error {
		downstream := status.Error(codes.ResourceExhausted, "levee: inventory: rate limit exceeded")
		if *answer.Load() != nil {
			return *answer.Load()
		}
		return grpcguard.UpstreamOverloaded(ctx, downstream)
	}}
	serveHop(t, front)
	defer front.stop()
	guard, err := grpcguard.NewClient(grpcguard.WithRetries(3), grpcguard.WithRetryBudget(nil),
		grpcguard.WithRetryBackoff(time.Millisecond, time.Millisecond), grpcguard.WithBreaker(nil), grpcguard.WithThrottle(nil))
	if err != nil {
		t.Fatal(err)
	}
	clients := []struct {
		name string
		opts []grpc.DialOption
	}{
		{"levee client", append(guard.DialOptions(), grpc.WithDisableRetry())},
		{"grpc-go retry policy", []grpc.DialOption{grpc.WithDefaultServiceConfig(grpcRetryPolicy)}},
	}
	for _, cl := range clients {
		cc := dial(t, front.addr, cl.opts...)
		client := testgrpc.NewTestServiceClient(cc)
		for _, tc := range []struct {
			name         string
			answer       error // nil: UpstreamOverloaded
			wantAttempts int64
		}{
			{"overloaded, don't retry", nil, 1},
			{"plain UNAVAILABLE", status.Error(codes.Unavailable, "front: busy"), 3},
		} {
			answer.Store(&tc.answer)
			front.attempts.Store(0)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := client.EmptyCall(ctx, &testgrpc.Empty{}, grpc.WaitForReady(true))
			cancel()
			if status.Code(err) != codes.Unavailable {
				t.Errorf("%s, %s: call = %v, want UNAVAILABLE", cl.name, tc.name, err)
			}
			if tc.answer == nil && !grpcguard.IsUpstreamOverloaded(err) {
				t.Errorf("%s, %s: call = %v, want the ErrorInfo reason %s", cl.name, tc.name, err, grpcguard.ReasonUpstreamOverloaded)
			}
			if got := front.attempts.Load(); got != tc.wantAttempts {
				t.Errorf("%s, %s: the front received %d attempts, want %d", cl.name, tc.name, got, tc.wantAttempts)
			}
		}
		cc.Close()
	}
}
