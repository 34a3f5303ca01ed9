package grpcguard

import (
	"context"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/clock/clocktest"
	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/queuedelay"
	"github.com/levee-go/levee/ratelimit"
)

// refuseFirst refuses its first call with a retry delay and admits the
// rest, recording when each call arrived.
type refuseFirst struct {
	mu       sync.Mutex
	arrivals []time.Time
	delay    time.Duration
}

func (g *refuseFirst) Name() string { return "first" }
func (g *refuseFirst) Admit(admission.Call) admission.Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.arrivals = append(g.arrivals, time.Now())
	if len(g.arrivals) == 1 {
		return admission.Refuse("first call refused", g.delay)
	}
	return admission.Decision{}
}
func (g *refuseFirst) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// TestRetryPolicyHonoursPushback: a grpc-go client whose service config
// retries RESOURCE_EXHAUSTED waits at least the server's pushback before
// the retry, and the retry succeeds.
func TestRetryPolicyHonoursPushback(t *testing.T) {
	const pushbackDelay = 300 * time.Millisecond
	g := &refuseFirst{delay: pushbackDelay}
	s := mustServer(t, []decide.Rule{{Methods: []string{emptyCall}, Guards: []admission.Guard{g}}})
	const serviceConfig = `{"methodConfig": [{
		"name": [{"service": "grpc.testing.TestService"}],
		"retryPolicy": {
			"maxAttempts": 3,
			"initialBackoff": "0.001s",
			"maxBackoff": "0.001s",
			"backoffMultiplier": 1,
			"retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
		}}]}`
	env := startServer(t, &testService{}, false, interceptorsOnly(s), grpc.WithDefaultServiceConfig(serviceConfig))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Fatalf("EmptyCall() = %v, want success after one retry", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.arrivals) != 2 {
		t.Fatalf("server saw %d attempts, want 2", len(g.arrivals))
	}
	if gap := g.arrivals[1].Sub(g.arrivals[0]); gap < pushbackDelay {
		t.Errorf("retry came %v after the refusal, want at least the pushback %v (its own backoff is 1ms)", gap, pushbackDelay)
	}
}

// TestCPUSaturationShedsAndRecovers: with the CPU saturated (a manual
// monitor), the Step controller's scale of 0.2 sheds 80% of calls, through
// the whole cooldown, and nothing after it.
func TestCPUSaturationShedsAndRecovers(t *testing.T) {
	mon := mustManual(t, cpu.WithCooldown(5*time.Second))
	defer mon.Close()
	ctrl := mustController(t, loadshed.Step{}, nil)
	defer ctrl.Close()
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{loadshed.NewGuard("cpu", ctrl, time.Second)}}})
	env := startServer(t, &testService{}, false, s.ServerOptions())
	ctx := context.Background()

	t0 := time.Now()
	observe := func(at time.Duration, util float64) {
		mon.Update(t0.Add(at), util)
		ctrl.Observe(t0.Add(at), mon.Utilization(), mon.Saturated())
	}
	burst := func() (ok, shed int) {
		for range 50 {
			_, err := env.client.EmptyCall(ctx, &testgrpc.Empty{})
			switch status.Code(err) {
			case codes.OK:
				ok++
			case codes.ResourceExhausted:
				shed++
			default:
				t.Fatalf("EmptyCall() = %v", err)
			}
		}
		return ok, shed
	}
	steps := []struct {
		name     string
		at       time.Duration
		util     float64
		wantShed int
	}{
		{"calm", 0, 0.3, 0},
		{"spike to 90%", time.Second, 0.9, 40},
		{"drops to 30%, in cooldown", 1500 * time.Millisecond, 0.3, 40},
		{"still in cooldown", 5 * time.Second, 0.3, 40},
		{"after cooldown", 6600 * time.Millisecond, 0.3, 0},
	}
	for _, st := range steps {
		observe(st.at, st.util)
		ok, shed := burst()
		if shed != st.wantShed || ok != 50-st.wantShed {
			t.Errorf("%s (scale %.2f): %d admitted, %d shed, want %d shed", st.name, ctrl.Scale(), ok, shed, st.wantShed)
		}
	}
}

// tapThenHandle drives a call through the Server's tap and unary
// interceptor directly, with the clock advanced by queued in between.
func tapThenHandle(t *testing.T, s *Server, clk *clocktest.Manual, ctx context.Context, queued time.Duration) (handled bool, err error) {
	t.Helper()
	tctx, err := s.TapHandle(ctx, &tap.Info{FullMethodName: emptyCall, Header: metadata.MD{}})
	if err != nil {
		return false, err
	}
	clk.Advance(queued)
	_, err = s.unary(tctx, nil, &grpc.UnaryServerInfo{FullMethod: emptyCall}, func(context.Context, any) (any, error) {
		handled = true
		clk.Advance(time.Millisecond)
		return nil, nil
	})
	return handled, err
}

func TestDeadlineRefusals(t *testing.T) {
	clk := clocktest.New(time.Now())
	dg := mustDeadline(t)
	bh := mustBulkhead(t, 1)
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{dg, bulkhead.NewGuard("slots", bh, 0)}}})
	s.clock.Fake = clk.Now

	withDeadline := func(d time.Duration) (context.Context, context.CancelFunc) {
		return context.WithDeadline(context.Background(), clk.Now().Add(d))
	}
	// No sample yet: judged by the deadline alone. Each call takes 1ms, so
	// the guard learns a service time of 1ms.
	ctx, cancel := withDeadline(10 * time.Millisecond)
	defer cancel()
	if handled, err := tapThenHandle(t, s, clk, ctx, 0); !handled || err != nil {
		t.Fatalf("first call: handled %v, err %v; want handled", handled, err)
	}
	if got := dg.ServiceTime(emptyCall); got != time.Millisecond {
		t.Fatalf("deadline.Guard.ServiceTime() = %v, want 1ms learned", got)
	}
	tests := []struct {
		name     string
		deadline time.Duration // from now, at the tap
		queued   time.Duration
		want     codes.Code
		handled  bool
		reason   string
	}{
		{"ample deadline", 50 * time.Millisecond, 0, codes.OK, true, ""},
		{"deadline passed at the tap", -time.Millisecond, 0, codes.DeadlineExceeded, false, deadline.ReasonExpired},
		{"deadline below service time", 500 * time.Microsecond, 0, codes.DeadlineExceeded, false, deadline.ReasonTooShort},
		{"queued until too late", 10 * time.Millisecond, 9500 * time.Microsecond, codes.DeadlineExceeded, false, deadline.ReasonTooShort},
		{"queued past the deadline", 10 * time.Millisecond, 20 * time.Millisecond, codes.DeadlineExceeded, false, deadline.ReasonExpired},
	}
	for _, tt := range tests {
		ctx, cancel := withDeadline(tt.deadline)
		handled, err := tapThenHandle(t, s, clk, ctx, tt.queued)
		cancel()
		st := status.Convert(err)
		if st.Code() != tt.want || handled != tt.handled || !strings.Contains(st.Message(), tt.reason) {
			t.Errorf("%s: code %v %q, handled %v; want %v %q, handled %v", tt.name, st.Code(), st.Message(), handled, tt.want, tt.reason, tt.handled)
		}
		if bh.InFlight() != 0 {
			t.Fatalf("%s: Bulkhead.InFlight() = %d after the call, want 0 (permits returned)", tt.name, bh.InFlight())
		}
	}
	// The learning call and "ample deadline" ran; calls refused at the
	// transport or at handler start did not.
	if got := s.HandlerStarts(); got != 2 {
		t.Errorf("Server.HandlerStarts() = %d, want 2", got)
	}
}

func TestQueueDelayThroughServer(t *testing.T) {
	clk := clocktest.New(time.Now())
	g := mustQueue(t, 5*time.Millisecond, 100*time.Millisecond)
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{g}}})
	s.clock.Fake = clk.Now
	ctx := context.Background()
	if handled, err := tapThenHandle(t, s, clk, ctx, 10*time.Millisecond); !handled || err != nil {
		t.Fatalf("10ms queued outside an episode: handled %v err %v, want handled", handled, err)
	}
	handled, err := tapThenHandle(t, s, clk, ctx, 200*time.Millisecond)
	if handled || status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), queuedelay.Reason) {
		t.Fatalf("200ms queued: handled %v err %v, want refused before the handler", handled, err)
	}
}

// TestShadowRecheckCountsOnce: in shadow mode, a deadline too short at the
// tap is one shadow refusal, not a second one when the handler starts.
func TestShadowRecheckCountsOnce(t *testing.T) {
	clk := clocktest.New(time.Now())
	s := mustServer(t, []decide.Rule{{Shadow: true, Guards: []admission.Guard{mustDeadline(t, deadline.WithServiceTime(emptyCall, time.Second))}}})
	s.clock.Fake = clk.Now
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(10*time.Millisecond))
	defer cancel()
	if handled, err := tapThenHandle(t, s, clk, ctx, 0); !handled || err != nil {
		t.Fatalf("shadow mode: handled %v, err %v; want handled", handled, err)
	}
	wantCounts(t, s, "after the call", 0, 0, 1, 1)
}

// TestAbandonedBeforeHandlerReturnsPermits: a call the tap admitted whose
// stream ends before its handler gives its slot back at once, and is
// refused at the handler, also when an earlier interceptor detached its
// context from the stream's cancellation.
func TestAbandonedBeforeHandlerReturnsPermits(t *testing.T) {
	for _, detach := range []bool{false, true} {
		bh := mustBulkhead(t, 1)
		s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{bulkhead.NewGuard("slots", bh, 0)}}})
		ctx, cancel := context.WithCancel(context.Background())
		tctx, err := s.TapHandle(ctx, &tap.Info{FullMethodName: emptyCall})
		if err != nil {
			t.Fatal(err)
		}
		if bh.InFlight() != 1 {
			t.Fatalf("Bulkhead.InFlight() = %d after the tap admitted, want 1", bh.InFlight())
		}
		wantCounts(t, s, "while the call waits for its handler", 0, 0, 0, 0)
		cancel() // the stream ends before its handler starts
		waitFor(t, "slot released by the stream's end", func() bool { return bh.InFlight() == 0 })
		if detach {
			tctx = context.WithoutCancel(tctx)
		}
		handled := false
		_, err = s.unary(tctx, nil, &grpc.UnaryServerInfo{FullMethod: emptyCall}, func(context.Context, any) (any, error) {
			handled = true
			return nil, nil
		})
		if handled || status.Code(err) != codes.Canceled {
			t.Errorf("detached %v: handler of an abandoned call: handled %v, err %v; want not run, CANCELED", detach, handled, err)
		}
		if bh.InFlight() != 0 {
			t.Errorf("detached %v: Bulkhead.InFlight() = %d, want 0", detach, bh.InFlight())
		}
		wantCounts(t, s, "after the stream ended", 1, 0, 0, 0) // admitted; no handler started
	}
}

// TestAbandonedInTheTap: a stream whose context has ended when the tap
// admits it is abandoned by the idle sweep's timer, on another goroutine,
// possibly while TapHandle is still returning; the sweep reads nothing
// TapHandle writes after registering the call (run with -race).
func TestAbandonedInTheTap(t *testing.T) {
	bh := mustBulkhead(t, 1)
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{bulkhead.NewGuard("slots", bh, 0)}}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tctx, err := s.TapHandle(ctx, &tap.Info{FullMethodName: emptyCall})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "slot released by the stream's end", func() bool { return bh.InFlight() == 0 })
	_, err = s.unary(tctx, nil, &grpc.UnaryServerInfo{FullMethod: emptyCall}, func(context.Context, any) (any, error) {
		t.Error("handler of an abandoned call ran")
		return nil, nil
	})
	if status.Code(err) != codes.Canceled {
		t.Errorf("unary() of an abandoned call = %v, want CANCELED", err)
	}
}

// TestAbandonedSweptByTheNextCall: with calls arriving, a call whose
// stream ended before its handler gives its slot back when the tap sweeps
// its pending calls, before the next call is admitted: not before
// pendingSweep has passed since the last sweep, at the first call after.
func TestAbandonedSweptByTheNextCall(t *testing.T) {
	bh := mustBulkhead(t, 8)
	s := mustServer(t, []Rule{{Guards: []admission.Guard{bulkhead.NewGuard("slots", bh, 0)}}})
	clk := clocktest.New(s.clock.Epoch().Add(time.Second))
	s.clock.Fake = clk.Now
	s.pending.idleEvery = time.Hour // no idle sweep in this test
	info := &tap.Info{FullMethodName: emptyCall}
	tapOne := func(ctx context.Context) {
		t.Helper()
		tctx, err := s.TapHandle(ctx, info)
		if err != nil {
			t.Fatal(err)
		}
		if tc := tctx.(*tapCtx); tc.st.phase.Load()&phaseMask != phaseAdmitted {
			t.Fatalf("TapHandle: call in phase %d, want admitted", tc.st.phase.Load()&phaseMask)
		}
	}
	live, stop := context.WithCancel(context.Background())
	defer stop()
	gone, cancel := context.WithCancel(context.Background())
	tapOne(gone) // sweeps the empty table, then registers the call
	cancel()     // its stream ends before its handler starts
	clk.Advance(pendingSweep - time.Microsecond)
	tapOne(live)
	if n := bh.InFlight(); n != 2 {
		t.Fatalf("Bulkhead.InFlight() = %d just before the next sweep is due, want 2: the abandoned call holds its slot until then", n)
	}
	clk.Advance(time.Microsecond)
	tapOne(live)
	if n := bh.InFlight(); n != 2 {
		t.Fatalf("Bulkhead.InFlight() = %d after the next call swept, want 2: the abandoned call's slot back, the new call's taken", n)
	}
}

// TestAbandonedSweptWhenIdle: with no call arriving, a call whose stream
// ended before its handler gives its slot back when the idle sweep's
// timer fires.
func TestAbandonedSweptWhenIdle(t *testing.T) {
	bh := mustBulkhead(t, 8)
	s := mustServer(t, []Rule{{Guards: []admission.Guard{bulkhead.NewGuard("slots", bh, 0)}}})
	s.pending.idleEvery = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := s.TapHandle(ctx, &tap.Info{FullMethodName: emptyCall}); err != nil {
		t.Fatal(err)
	}
	cancel()
	waitFor(t, "the idle sweep gave the abandoned call's slot back", func() bool { return bh.InFlight() == 0 })
	waitFor(t, "the idle sweep's timer disarmed once no call is pending", func() bool { return !s.pending.armed.Load() })
}

// TestPendingTableFull: a call that finds no free slot in the pending
// calls falls back on context.AfterFunc, and is abandoned at once when its
// stream ends.
func TestPendingTableFull(t *testing.T) {
	bh := mustBulkhead(t, 2*pendingSlots)
	s := mustServer(t, []Rule{{Guards: []admission.Guard{bulkhead.NewGuard("slots", bh, 0)}}})
	info := &tap.Info{FullMethodName: emptyCall}
	var cancels []context.CancelFunc
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	admitted := 0
	for fellBack := false; !fellBack; {
		if admitted == 2*pendingSlots {
			t.Fatalf("%d calls pending: none fell back on AfterFunc, want one once the %d slots are taken", admitted, pendingSlots)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		tctx, err := s.TapHandle(ctx, info)
		if err != nil {
			t.Fatal(err)
		}
		admitted++
		fellBack = tctx.(*tapCtx).slot < 0
	}
	cancels[len(cancels)-1]() // the fallen-back call's stream ends
	waitFor(t, "the fallen-back call's slot given back by its AfterFunc", func() bool { return bh.InFlight() == admitted-1 })
}

// TestStaleTapContextLeavesReusedStateAlone: the tap's call states go
// back to a pool when their call is finished; a context of a finished
// call (kept by a handler's goroutine, or read by a sweep just before the
// call started) whose state now serves another call neither abandons
// that call nor runs its interceptor on it. Without the generation in
// callState.phase, the stale abandon gives the new call's bulkhead slot
// back and the stale interceptor takes over its state.
func TestStaleTapContextLeavesReusedStateAlone(t *testing.T) {
	bh := mustBulkhead(t, 8)
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{bulkhead.NewGuard("slots", bh, 0)}}})
	s.pending.idleEvery = time.Hour // no idle sweep in this test
	info := &tap.Info{FullMethodName: emptyCall}
	uinfo := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	ran := 0
	handler := func(context.Context, any) (any, error) { ran++; return nil, nil }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tap := func() *tapCtx {
		t.Helper()
		tctx, err := s.TapHandle(ctx, info)
		if err != nil {
			t.Fatal(err)
		}
		return tctx.(*tapCtx)
	}
	// The pool gives a state back to the next call on the same processor,
	// except now and then under the race detector: try until it does.
	var old, next *tapCtx
	for range 1000 {
		old = tap()
		if _, err := s.unary(old, nil, uinfo, handler); err != nil {
			t.Fatal(err)
		}
		if next = tap(); next.st == old.st {
			break
		}
		if _, err := s.unary(next, nil, uinfo, handler); err != nil {
			t.Fatal(err)
		}
	}
	if next.st != old.st {
		t.Fatal("no call state was used again in 1000 calls")
	}
	ran = 0
	old.abandon()
	if n := bh.InFlight(); n != 1 {
		t.Fatalf("after a stale abandon, Bulkhead.InFlight() = %d, want 1: the new call's slot", n)
	}
	if _, err := s.unary(old, nil, uinfo, handler); status.Code(err) != codes.Canceled || ran != 0 {
		t.Fatalf("stale interceptor = %v, handler ran %d times; want CANCELED, 0", err, ran)
	}
	if _, err := s.unary(next, nil, uinfo, handler); err != nil || ran != 1 {
		t.Fatalf("new call's interceptor = %v, handler ran %d times; want nil, 1", err, ran)
	}
	if n := bh.InFlight(); n != 0 {
		t.Fatalf("after the new call, Bulkhead.InFlight() = %d, want 0", n)
	}
}

// TestTapAllocatesOneObject: the tap's admitted path allocates one
// object, the context it returns (the call's state comes from a pool);
// the interceptor nothing (TestAdmittedPathAllocatesNothing and the protect
// package's tests cover it alone).
func TestTapAllocatesOneObject(t *testing.T) {
	s, base := chainServer(t)
	info := &tap.Info{FullMethodName: emptyCall}
	uinfo := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	ctx, cancel := context.WithCancel(base)
	defer cancel()
	n := testing.AllocsPerRun(1000, func() {
		tctx, err := s.TapHandle(ctx, info)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.unary(tctx, nil, uinfo, handler); err != nil {
			t.Fatal(err)
		}
	})
	if n != 1 {
		t.Errorf("TapHandle then the interceptor allocate %v objects per call, want 1 (the call's context)", n)
	}
}

// TestShadowStatsUnderTraffic: a shadow rule whose bucket admits one call
// ever, hammered while Stats is read: Admitted must never read more than
// that one call.
func TestShadowStatsUnderTraffic(t *testing.T) {
	s := mustServer(t, []decide.Rule{{Shadow: true, Guards: []admission.Guard{ratelimit.NewGuard("rate", mustLimiter(t, 0, 1))}}})
	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	var wg sync.WaitGroup
	const callers, calls = 8, 20000
	for range callers {
		wg.Go(func() {
			for range calls {
				s.unary(context.Background(), nil, info, handler)
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	for {
		if st := s.Stats()[0]; st.Admitted > 1 {
			t.Fatalf("Stats() under traffic = %+v, want Admitted <= 1", st)
		}
		select {
		case <-done:
			wantCounts(t, s, "after the traffic", 1, 0, callers*calls-1, callers*calls)
			return
		default:
			runtime.Gosched()
		}
	}
}

// wantCounts checks the first guard's Stats and the Server's handler
// starts.
func wantCounts(t *testing.T, s *Server, when string, admitted, refused, shadow, starts uint64) {
	t.Helper()
	st := s.Stats()[0]
	if st.Admitted != admitted || st.Refused != refused || st.ShadowRefused != shadow {
		t.Errorf("%s: Stats() = %+v, want %d admitted, %d refused, %d shadow-refused", when, st, admitted, refused, shadow)
	}
	if got := s.HandlerStarts(); got != starts {
		t.Errorf("%s: HandlerStarts() = %d, want %d", when, got, starts)
	}
}

// TestStatsNeverDecrease: in shadow mode a refusal is counted when the tap
// admits the call, and the call when its handler starts; Admitted must not
// dip in between.
func TestStatsNeverDecrease(t *testing.T) {
	lim := mustLimiter(t, 0, 1)
	s := mustServer(t, []decide.Rule{{Shadow: true, Guards: []admission.Guard{ratelimit.NewGuard("rate", lim)}}})
	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	run := func(ctx context.Context) {
		if _, err := s.unary(ctx, nil, info, handler); err != nil {
			t.Fatal(err)
		}
	}
	admitTap := func() context.Context {
		ctx, err := s.TapHandle(context.Background(), &tap.Info{FullMethodName: emptyCall})
		if err != nil {
			t.Fatal(err)
		}
		return ctx
	}
	run(admitTap()) // takes the one token: admitted
	wantCounts(t, s, "after the first call", 1, 0, 0, 1)
	waiting := admitTap() // shadow-refused, its handler not started yet
	wantCounts(t, s, "with a shadow-refused call waiting", 1, 0, 1, 1)
	run(waiting)
	wantCounts(t, s, "after it ran", 1, 0, 1, 2)
}

func TestShadowModeRefusesNothingButCounts(t *testing.T) {
	lim := mustLimiter(t, 0, 1)
	s := mustServer(t, []decide.Rule{{Shadow: true, Guards: []admission.Guard{ratelimit.NewGuard("rate", lim)}}})
	env := startServer(t, &testService{}, false, s.ServerOptions())
	for i := range 5 {
		if _, err := env.client.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
			t.Fatalf("call %d in shadow mode: %v", i, err)
		}
	}
	st := s.Stats()[0]
	if st.Admitted != 1 || st.ShadowRefused != 4 || st.Refused != 0 {
		t.Errorf("Stats() = %+v, want 1 admitted, 4 shadow-refused, 0 refused", st)
	}
}

// TestUnaryChainAllocs: the admitted path through bucket + per-key bucket
// + bulkhead allocates nothing.
func TestUnaryChainAllocs(t *testing.T) {
	s, ctx := chainServer(t)
	checkUnaryAllocs(t, "unary interceptor chain", s, ctx)
}

// checkUnaryAllocs checks that an admitted call through s's unary
// interceptor allocates nothing.
func checkUnaryAllocs(t *testing.T, what string, s *Server, ctx context.Context) {
	t.Helper()
	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	if got := testing.AllocsPerRun(1000, func() {
		if _, err := s.unary(ctx, nil, info, handler); err != nil {
			t.Fatal(err)
		}
	}); got != 0 {
		t.Errorf("%s: %v allocations per admitted call, want 0", what, got)
	}
}

// chainServer is the benchmark chain: a global bucket, per-peer buckets
// and a bulkhead, all admitting.
func chainServer(t testing.TB) (*Server, context.Context) {
	s := mustServer(t, []decide.Rule{{
		Key: decide.PeerKey(),
		Guards: []admission.Guard{
			ratelimit.NewGuard("global", mustLimiter(t, 1e9, 1<<30)),
			ratelimit.NewKeyedGuard("client", mustKeyed(t, 1e9, 1<<30, ratelimit.WithSweepInterval(0))),
			bulkhead.NewGuard("slots", mustBulkhead(t, 1024), 0),
		},
	}})
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}})
	return s, ctx
}

// strictQueue is a user's guard built on a built-in one: it embeds
// *queuedelay.Guard, whose methods it inherits, and overrides Admit and
// Finish — and Traits, which declares that the built-in's Admit always
// admits and its Finish matters only for skipped calls, which is no longer
// true (see admission.Describer).
type strictQueue struct {
	*queuedelay.Guard
	refuse   bool
	finished int
}

func (g *strictQueue) Admit(c admission.Call) admission.Decision {
	if g.refuse {
		return admission.Refuse("strict", 0)
	}
	return g.Guard.Admit(c)
}

func (g *strictQueue) Traits() admission.Traits {
	return admission.Traits{Cost: admission.CostQueue}
}

func (g *strictQueue) Finish(admission.Call, admission.Permit, admission.Outcome) { g.finished++ }

// TestGuardEmbeddingBuiltinIsCustom: a guard type that embeds a built-in
// one and overrides Admit, Finish and Traits has Admit and Finish called
// as it declares, not as the built-in declared.
func TestGuardEmbeddingBuiltinIsCustom(t *testing.T) {
	g := &strictQueue{Guard: mustQueue(t, queuedelay.DefaultTarget, queuedelay.DefaultInterval), refuse: true}
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{g}}})
	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	_, err := s.unary(context.Background(), nil, info, handler)
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "strict") {
		t.Fatalf("call refused by the overriding Admit: got %v, want RESOURCE_EXHAUSTED naming it", err)
	}
	g.refuse = false
	if _, err := s.unary(context.Background(), nil, info, handler); err != nil {
		t.Fatalf("admitted call: %v", err)
	}
	if g.finished != 1 {
		t.Errorf("overriding Finish ran %d times for the call that ran, want 1", g.finished)
	}
}

func mustDeadline(t testing.TB, opts ...deadline.Option) *deadline.Guard {
	t.Helper()
	g, err := deadline.New(opts...)
	if err != nil {
		t.Fatalf("deadline.New: %v", err)
	}
	return g
}

func mustQueue(t testing.TB, target, interval time.Duration) *queuedelay.Guard {
	t.Helper()
	g, err := queuedelay.New(target, interval)
	if err != nil {
		t.Fatalf("queuedelay.New: %v", err)
	}
	return g
}
