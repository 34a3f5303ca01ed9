package grpcguard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/holdoff"
	"github.com/levee-go/levee/internal/clock/clocktest"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/throttle"
)

// cliConn returns a ClientConn that is never connected: the fake invokers
// of the unit tests only read its Target.
func cliConn(t testing.TB, target string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient(%q) = %v", target, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func mustClient(t testing.TB, clk *clocktest.Manual, opts ...ClientOption) *Client {
	t.Helper()
	c, err := NewClient(opts...)
	if err != nil {
		t.Fatalf("NewClient() = %v", err)
	}
	if clk != nil {
		c.clock.Fake = clk.Now
	}
	return c
}

// fakeInvoker answers every call with err, and fills every grpc.Trailer
// option with trailer, as grpc-go does; it counts the calls that reach it.
type fakeInvoker struct {
	mu      sync.Mutex
	err     error
	trailer metadata.MD
	calls   int
	nopts   int // len(opts) of the last call
}

func (f *fakeInvoker) invoke(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.nopts = len(opts)
	for _, o := range opts {
		if t, ok := o.(grpc.TrailerCallOption); ok {
			*t.TrailerAddr = f.trailer
		}
	}
	return f.err
}

func (f *fakeInvoker) set(err error, trailer metadata.MD) {
	f.mu.Lock()
	f.err, f.trailer = err, trailer
	f.mu.Unlock()
}

func (f *fakeInvoker) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

const cliMethod = "/pkg.Svc/Get"

func noBreakerNoThrottle() []ClientOption {
	return []ClientOption{WithBreaker(nil), WithThrottle(nil)}
}

func withRetryInfo(code codes.Code, d time.Duration) error {
	st, err := status.New(code, "server refused").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// localErr is a local refusal of some other guard in the process.
type localErr struct{}

func (localErr) Error() string      { return "refused here" }
func (localErr) LocalRefusal() bool { return true }

func TestClassifyError(t *testing.T) {
	tests := []struct {
		name string
		give error
		want breaker.Outcome
	}{
		{"nil", nil, breaker.Success},
		{"OK status", status.Error(codes.OK, ""), breaker.Success},
		{"UNAVAILABLE", status.Error(codes.Unavailable, "x"), breaker.Failure},
		{"DEADLINE_EXCEEDED", status.Error(codes.DeadlineExceeded, "x"), breaker.Failure},
		// Application errors are accepts: the backend answered.
		{"INTERNAL", status.Error(codes.Internal, "x"), breaker.Success},
		{"UNKNOWN", status.Error(codes.Unknown, "x"), breaker.Success},
		{"UNKNOWN from a handler's plain error", status.Convert(errors.New("boom")).Err(), breaker.Success},
		{"DATA_LOSS", status.Error(codes.DataLoss, "x"), breaker.Success},
		{"undefined code", status.Error(codes.Code(42), "x"), breaker.Success},
		{"RESOURCE_EXHAUSTED server refusal", withRetryInfo(codes.ResourceExhausted, time.Second), breaker.Failure},
		{"RESOURCE_EXHAUSTED received too large", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (9 vs. 4)"), breaker.Success},
		{"RESOURCE_EXHAUSTED send too large", status.Error(codes.ResourceExhausted, "trying to send message larger than max (9 vs. 4)"), breaker.Ignore},
		{"INVALID_ARGUMENT", status.Error(codes.InvalidArgument, "x"), breaker.Success},
		{"NOT_FOUND", status.Error(codes.NotFound, "x"), breaker.Success},
		{"ALREADY_EXISTS", status.Error(codes.AlreadyExists, "x"), breaker.Success},
		{"FAILED_PRECONDITION", status.Error(codes.FailedPrecondition, "x"), breaker.Success},
		{"PERMISSION_DENIED", status.Error(codes.PermissionDenied, "x"), breaker.Success},
		{"UNAUTHENTICATED", status.Error(codes.Unauthenticated, "x"), breaker.Success},
		{"ABORTED", status.Error(codes.Aborted, "x"), breaker.Success},
		{"OUT_OF_RANGE", status.Error(codes.OutOfRange, "x"), breaker.Success},
		{"UNIMPLEMENTED", status.Error(codes.Unimplemented, "x"), breaker.Success},
		{"CANCELED", status.Error(codes.Canceled, "x"), breaker.Ignore},
		{"context.Canceled", context.Canceled, breaker.Ignore},
		{"wrapped context.Canceled", fmt.Errorf("op: %w", context.Canceled), breaker.Ignore},
		{"context.DeadlineExceeded", context.DeadlineExceeded, breaker.Failure},
		{"plain error", errors.New("boom"), breaker.Success},
		{"wrapped context.DeadlineExceeded", fmt.Errorf("op: %w", context.DeadlineExceeded), breaker.Failure},
		{"breaker.ErrOpen", breaker.ErrOpen, breaker.Ignore},
		{"throttle.ErrThrottled", throttle.ErrThrottled, breaker.Ignore},
		{"other local refusal, wrapped", fmt.Errorf("x: %w", localErr{}), breaker.Ignore},
		{"local refusal in a join", errors.Join(errors.New("a"), localErr{}), breaker.Ignore},
		{"client refusal", &clientRefusal{st: status.New(codes.Unavailable, "x")}, breaker.Ignore},
		{"wrapped UNAVAILABLE", fmt.Errorf("call: %w", status.Error(codes.Unavailable, "x")), breaker.Failure},
		{"wrapped NOT_FOUND", fmt.Errorf("call: %w", status.Error(codes.NotFound, "x")), breaker.Success},
		{"wrapped INTERNAL", fmt.Errorf("call: %w", status.Error(codes.Internal, "x")), breaker.Success},
		{"wrapped RESOURCE_EXHAUSTED", fmt.Errorf("call: %w", status.Error(codes.ResourceExhausted, "busy")), breaker.Failure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ClassifyError(tt.give); got != tt.want {
				t.Errorf("ClassifyError(%v) = %v, want %v", tt.give, got, tt.want)
			}
		})
	}
}

func TestClassifyErrorAllocs(t *testing.T) {
	errs := []error{nil, status.Error(codes.Unavailable, "x"), status.Error(codes.NotFound, "x"), status.Error(codes.Unknown, "x")}
	for _, err := range errs {
		if n := testing.AllocsPerRun(100, func() { ClassifyError(err) }); n != 0 {
			t.Errorf("ClassifyError(%v) allocates %v times, want 0", err, n)
		}
	}
}

func TestBreakerGuard(t *testing.T) {
	clk := clocktest.New(time.Now())
	b := mustBreaker(t, breaker.WithCountWindow(4), breaker.WithMinimumCalls(4), breaker.WithFailureRate(50),
		breaker.WithWaitInOpen(10*time.Second), breaker.WithHalfOpenCalls(1), breaker.WithClassifier(ClassifyError))
	g := breaker.NewGuard("downstream", b)
	if g.Name() != "downstream" {
		t.Errorf("Name() = %q, want %q", g.Name(), "downstream")
	}
	call := func() admission.Call { return admission.Call{Method: cliMethod, Now: clk.Now()} }
	fail := admission.Outcome{Err: status.Error(codes.Unavailable, "down"), Duration: time.Millisecond}
	for i := range 4 {
		c := call()
		d := g.Admit(c)
		if d.Refused {
			t.Fatalf("call %d: admission.Grant() refused while closed", i)
		}
		g.Finish(c, d.Permit, fail)
	}
	if d := g.Admit(call()); !d.Refused || d.Reason != breaker.ReasonOpen {
		t.Fatalf("after 4 failures: admission.Grant() = %+v, want refused with %q", d, breaker.ReasonOpen)
	}
	clk.Advance(10*time.Second + time.Millisecond) // the wait runs from the end of the last failure
	c := call()
	probe := g.Admit(c)
	if probe.Refused {
		t.Fatalf("after the wait: admission.Grant() refused, want a half-open probe")
	}
	if d := g.Admit(call()); !d.Refused || d.Reason != breaker.ReasonProbing {
		t.Fatalf("probe in flight: admission.Grant() = %+v, want refused with %q", d, breaker.ReasonProbing)
	}
	// A later guard refused the probe: the breaker ignores it and gives the
	// probe permit back.
	g.Finish(c, probe.Permit, admission.Outcome{Skipped: true})
	if st := b.StateAt(clk.Now()); st != breaker.StateHalfOpen {
		t.Fatalf("after a skipped probe: state = %v, want half-open", st)
	}
	c = call()
	probe = g.Admit(c)
	if probe.Refused {
		t.Fatalf("after a skipped probe: admission.Grant() = %+v, want admitted", probe)
	}
	g.Finish(c, probe.Permit, admission.Outcome{Err: status.Error(codes.NotFound, "no such sku"), Duration: time.Millisecond})
	if st := b.StateAt(clk.Now()); st != breaker.StateClosed {
		t.Fatalf("after a NOT_FOUND probe: state = %v, want closed", st)
	}
	if snap := b.Snapshot(); snap.Ignored != 1 {
		t.Errorf("Snapshot().Ignored = %d, want 1 (the skipped probe)", snap.Ignored)
	}
}

func TestThrottleGuard(t *testing.T) {
	clk := clocktest.New(time.Now())
	// drop whenever P > 0, with the formula from the first request
	thr := mustThrottle(t, throttle.WithRandom(func() float64 { return 0 }), throttle.WithMinRequests(0))
	g := throttle.NewGuard("throttle", thr, Judge(ClassifyError))
	finish := func(o admission.Outcome) {
		t.Helper()
		c := admission.Call{Now: clk.Now()}
		d := g.Admit(c)
		if d.Refused {
			t.Fatalf("admission.Grant() refused with P = %v, want admitted", thr.ProbabilityAt(c.Now))
		}
		g.Finish(c, d.Permit, o)
	}
	// Neither skipped nor ignored calls are recorded.
	finish(admission.Outcome{Skipped: true})
	finish(admission.Outcome{Err: status.Error(codes.Canceled, "gone")})
	if s := thr.SnapshotAt(clk.Now()); s.Requests != 0 {
		t.Fatalf("after a skipped and a canceled call: Requests = %d, want 0", s.Requests)
	}
	// Application errors are accepts; overload is not.
	finish(admission.Outcome{Err: status.Error(codes.InvalidArgument, "bad")})
	finish(admission.Outcome{Err: status.Error(codes.Unknown, "boom")})
	finish(admission.Outcome{Err: status.Error(codes.ResourceExhausted, "busy")})
	finish(admission.Outcome{Err: status.Error(codes.DeadlineExceeded, "late")})
	s := thr.SnapshotAt(clk.Now())
	if s.Requests != 4 || s.Accepts != 2 {
		t.Fatalf("Snapshot = %d requests, %d accepts; want 4, 2", s.Requests, s.Accepts)
	}
	// P = (4 - 2*2)/5 = 0 still; one more refusal makes it positive.
	finish(admission.Outcome{Err: status.Error(codes.Unavailable, "down")})
	if d := g.Admit(admission.Call{Now: clk.Now()}); !d.Refused || d.Reason != throttle.ReasonThrottled {
		t.Fatalf("P = %v: admission.Grant() = %+v, want refused with %q", thr.ProbabilityAt(clk.Now()), d, throttle.ReasonThrottled)
	}
}

func TestNewClientRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		give ClientOption
		want string
	}{
		{"nil classifier", WithClassifier(nil), "grpcguard: WithClassifier: classifier must not be nil"},
		{"negative hold-off", WithMaxHoldOff(-time.Second), "grpcguard: WithMaxHoldOff: want d >= 0, got -1s"},
		{"no targets", WithMaxEntries(0, 1), "grpcguard: WithMaxEntries: want targets >= 1 and methods >= 1, got 0 and 1"},
		{"no methods", WithMaxEntries(1, 0), "grpcguard: WithMaxEntries: want targets >= 1 and methods >= 1, got 1 and 0"},
		{"zero burst", WithTargetLimit(10, 0), "grpcguard: WithTargetLimit: want rate >= 0 and burst >= 1, got rate 10, burst 0"},
		{"negative rate", WithTargetLimit(-1, 1), "grpcguard: WithTargetLimit: want rate >= 0 and burst >= 1, got rate -1, burst 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewClient(tt.give)
			if err == nil || err.Error() != tt.want {
				t.Errorf("NewClient() = %v, %v; want error %q", c, err, tt.want)
			}
		})
	}
}

func TestClientRefusalNeverInvokes(t *testing.T) {
	clk := clocktest.New(time.Now())
	c := mustClient(t, clk, WithThrottle(nil))
	cc := cliConn(t, "passthrough:///inventory")
	inv := &fakeInvoker{}
	unary := c.UnaryClientInterceptor()
	if err := unary(context.Background(), cliMethod, nil, nil, cc, inv.invoke); err != nil {
		t.Fatalf("first call = %v, want nil", err)
	}
	c.Breaker(cc.Target(), cliMethod).ForceOpen()
	for i := range 3 {
		err := unary(context.Background(), cliMethod, nil, nil, cc, inv.invoke)
		if got := status.Code(err); got != codes.Unavailable {
			t.Fatalf("refused call %d: code = %v, want Unavailable", i, got)
		}
		if !errors.Is(err, ErrClientRefused) || !errors.Is(err, breaker.ErrOpen) || !isLocalRefusal(err) {
			t.Errorf("refused call %d: err = %v, want ErrClientRefused, breaker.ErrOpen and a local refusal", i, err)
		}
		st, _ := status.FromError(err)
		if want := "levee: client breaker: circuit breaker open (passthrough:///inventory)"; st.Message() != want {
			t.Errorf("refused call %d: message = %q, want %q", i, st.Message(), want)
		}
		if _, ok := RetryDelay(err); ok {
			t.Errorf("refused call %d: has a RetryInfo detail, want none (the breaker does not know when it closes)", i)
		}
	}
	if n := inv.count(); n != 1 {
		t.Errorf("invoker saw %d calls, want 1 (refused calls never leave)", n)
	}
}

func TestClientRefusalCauses(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		want   error
	}{
		{"breaker open", breaker.ReasonOpen, breaker.ErrOpen},
		{"breaker probing", breaker.ReasonProbing, breaker.ErrTooManyCalls},
		{"throttled", throttle.ReasonThrottled, throttle.ErrThrottled},
	}
	c := mustClient(t, nil)
	e := c.entry("t", cliMethod)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e.refusal(0, admission.Refuse(tt.reason, 0))
			if !errors.Is(err, tt.want) || !errors.Is(err, ErrClientRefused) {
				t.Errorf("refusal(%q) = %v, want it to match %v and ErrClientRefused", tt.reason, err, tt.want)
			}
		})
	}
}

func TestClientLaterRefusalGivesBack(t *testing.T) {
	clk := clocktest.New(time.Now())
	lim := mustLimiter(t, 1, 1)
	c := mustClient(t, clk, WithTargetLimiter(func(string) *ratelimit.Limiter { return lim }),
		WithBreaker(func(string, string) []breaker.Option {
			return []breaker.Option{breaker.WithHalfOpenCalls(1), breaker.WithWaitInOpen(time.Second)}
		}))
	cc := cliConn(t, "passthrough:///inventory")
	inv := &fakeInvoker{}
	unary := c.UnaryClientInterceptor()
	_ = unary(context.Background(), cliMethod, nil, nil, cc, inv.invoke)
	clk.Advance(time.Second) // the bucket is full again
	c.Breaker(cc.Target(), cliMethod).ForceOpen()
	for range 3 {
		if err := unary(context.Background(), cliMethod, nil, nil, cc, inv.invoke); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("call with the breaker forced open = %v, want breaker.ErrOpen", err)
		}
	}
	if got := lim.Tokens(clk.Now()); got != 1 {
		t.Errorf("bucket holds %v tokens after calls the breaker refused, want 1 (given back)", got)
	}
	// A throttle drop after the breaker admitted a probe gives the probe
	// back: here a custom guard that runs last plays the later guard.
	c2 := mustClient(t, clk, WithThrottle(nil),
		WithBreaker(func(string, string) []breaker.Option {
			return []breaker.Option{breaker.WithHalfOpenCalls(1), breaker.WithWaitInOpen(time.Second),
				breaker.WithCountWindow(1), breaker.WithMinimumCalls(1)}
		}),
		WithClientGuards(func(string, string) []admission.Guard { return []admission.Guard{&refuseNext{}} }))
	inv.set(status.Error(codes.Unavailable, "down"), nil)
	_ = c2.UnaryClientInterceptor()(context.Background(), cliMethod, nil, nil, cc, inv.invoke)
	b := c2.Breaker(cc.Target(), cliMethod)
	if st := b.StateAt(clk.Now()); st != breaker.StateOpen {
		t.Fatalf("state after one failure = %v, want open", st)
	}
	clk.Advance(time.Second)
	c2.entry(cc.Target(), cliMethod).chain.Guard(2).(*refuseNext).arm()
	err := c2.UnaryClientInterceptor()(context.Background(), cliMethod, nil, nil, cc, inv.invoke)
	if !errors.Is(err, ErrClientRefused) || errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("probe refused by the custom guard = %v, want a client refusal that is not the breaker's", err)
	}
	if st := b.StateAt(clk.Now()); st != breaker.StateHalfOpen {
		t.Fatalf("state after the skipped probe = %v, want half-open", st)
	}
	inv.set(nil, nil)
	if err := c2.UnaryClientInterceptor()(context.Background(), cliMethod, nil, nil, cc, inv.invoke); err != nil {
		t.Fatalf("next probe = %v, want nil (the skipped probe's permit was given back)", err)
	}
	if st := b.StateAt(clk.Now()); st != breaker.StateClosed {
		t.Errorf("state after a successful probe = %v, want closed", st)
	}
}

// refuseNext refuses the next call after arm.
type refuseNext struct {
	mu    sync.Mutex
	armed bool
}

func (g *refuseNext) arm() { g.mu.Lock(); g.armed = true; g.mu.Unlock() }

func (g *refuseNext) Name() string { return "custom" }
func (g *refuseNext) Admit(admission.Call) admission.Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.armed {
		g.armed = false
		return admission.Refuse("custom refusal", 0)
	}
	return admission.Decision{}
}
func (g *refuseNext) Finish(admission.Call, admission.Permit, admission.Outcome) {}

func TestClientHoldOff(t *testing.T) {
	refused := status.Error(codes.ResourceExhausted, "busy")
	tests := []struct {
		name    string
		err     error
		trailer metadata.MD
		want    time.Duration
	}{
		{"pushback trailer", refused, metadata.Pairs(PushbackTrailer, "1500"), 1500 * time.Millisecond},
		{"trailer wins over RetryInfo", withRetryInfo(codes.ResourceExhausted, 3*time.Second), metadata.Pairs(PushbackTrailer, "200"), 200 * time.Millisecond},
		{"RetryInfo alone", withRetryInfo(codes.ResourceExhausted, 3*time.Second), nil, 3 * time.Second},
		{"UNAVAILABLE with RetryInfo", withRetryInfo(codes.Unavailable, time.Second), nil, time.Second},
		{"negative pushback, RetryInfo used", withRetryInfo(codes.ResourceExhausted, time.Second), metadata.Pairs(PushbackTrailer, "-1"), time.Second},
		{"negative pushback alone", refused, metadata.Pairs(PushbackTrailer, "-1"), 0},
		{"malformed pushback", refused, metadata.Pairs(PushbackTrailer, "soon"), 0},
		{"capped", refused, metadata.Pairs(PushbackTrailer, "600000"), 10 * time.Second},
		{"INTERNAL is not a refusal", withRetryInfo(codes.Internal, time.Second), metadata.Pairs(PushbackTrailer, "1000"), 0},
		{"local refusal from further in", fmt.Errorf("%w: %w", localErr{}, withRetryInfo(codes.ResourceExhausted, time.Second)), nil, 0},
		{"success", nil, metadata.Pairs(PushbackTrailer, "1000"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New(time.Now())
			c := mustClient(t, clk, append(noBreakerNoThrottle(), WithMaxHoldOff(10*time.Second))...)
			cc := cliConn(t, "passthrough:///inventory")
			inv := &fakeInvoker{err: tt.err, trailer: tt.trailer}
			unary := c.UnaryClientInterceptor()
			if err := unary(context.Background(), cliMethod, nil, nil, cc, inv.invoke); err != tt.err {
				t.Fatalf("call = %v, want the invoker's %v", err, tt.err)
			}
			if got := c.HoldOff(cc.Target()); got != tt.want {
				t.Fatalf("HoldOff() = %v, want %v", got, tt.want)
			}
			if tt.want == 0 {
				if err := unary(context.Background(), "/pkg.Svc/Other", nil, nil, cc, inv.invoke); errors.Is(err, ErrClientRefused) {
					t.Fatalf("next call = %v, want it sent", err)
				}
				return
			}
			// Every method of the target is held off, until the delay is over.
			clk.Advance(tt.want - time.Millisecond)
			inv.set(nil, nil)
			err := unary(context.Background(), "/pkg.Svc/Other", nil, nil, cc, inv.invoke)
			if status.Code(err) != codes.Unavailable || !errors.Is(err, ErrClientRefused) {
				t.Fatalf("call during the hold-off = %v, want a local UNAVAILABLE refusal", err)
			}
			if d, ok := RetryDelay(err); !ok || d != time.Millisecond {
				t.Errorf("RetryDelay(refusal) = %v, %v; want 1ms, true", d, ok)
			}
			if st, _ := status.FromError(err); !strings.Contains(st.Message(), "holdoff: "+holdoff.Reason) {
				t.Errorf("refusal message = %q, want it to name the holdoff guard", st.Message())
			}
			if n := inv.count(); n != 1 {
				t.Fatalf("invoker saw %d calls, want 1", n)
			}
			clk.Advance(time.Millisecond)
			if err := unary(context.Background(), cliMethod, nil, nil, cc, inv.invoke); err != nil {
				t.Fatalf("call after the hold-off = %v, want nil", err)
			}
		})
	}
}

func TestClientHoldOffIsPerTarget(t *testing.T) {
	clk := clocktest.New(time.Now())
	c := mustClient(t, clk, noBreakerNoThrottle()...)
	a, b := cliConn(t, "passthrough:///a"), cliConn(t, "passthrough:///b")
	inv := &fakeInvoker{err: status.Error(codes.ResourceExhausted, "busy"), trailer: metadata.Pairs(PushbackTrailer, "1000")}
	unary := c.UnaryClientInterceptor()
	_ = unary(context.Background(), cliMethod, nil, nil, a, inv.invoke)
	inv.set(nil, nil)
	if err := unary(context.Background(), cliMethod, nil, nil, b, inv.invoke); err != nil {
		t.Errorf("call to b while a is held off = %v, want nil", err)
	}
	if err := unary(context.Background(), cliMethod, nil, nil, a, inv.invoke); !errors.Is(err, ErrClientRefused) {
		t.Errorf("call to a while held off = %v, want a local refusal", err)
	}
}

func TestClientKeepsCallersTrailer(t *testing.T) {
	clk := clocktest.New(time.Now())
	c := mustClient(t, clk, noBreakerNoThrottle()...)
	cc := cliConn(t, "passthrough:///inventory")
	inv := &fakeInvoker{err: status.Error(codes.ResourceExhausted, "busy"), trailer: metadata.Pairs(PushbackTrailer, "700", "x-other", "v")}
	unary := c.UnaryClientInterceptor()

	var mine metadata.MD
	_ = unary(context.Background(), cliMethod, nil, nil, cc, inv.invoke, grpc.Trailer(&mine), grpc.WaitForReady(false))
	if got := mine.Get("x-other"); len(got) != 1 || got[0] != "v" {
		t.Errorf("caller's trailer = %v, want the server's", mine)
	}
	if inv.nopts != 2 {
		t.Errorf("invoker got %d options, want the caller's 2 (its Trailer is reused)", inv.nopts)
	}
	if got := c.HoldOff(cc.Target()); got != 700*time.Millisecond {
		t.Errorf("HoldOff() = %v, want 700ms read through the caller's trailer", got)
	}

	clk.Advance(time.Second)
	_ = unary(context.Background(), cliMethod, nil, nil, cc, inv.invoke, grpc.WaitForReady(false))
	if inv.nopts != 2 {
		t.Errorf("invoker got %d options, want the caller's 1 and the Client's Trailer", inv.nopts)
	}
	if got := c.HoldOff(cc.Target()); got != 700*time.Millisecond {
		t.Errorf("HoldOff() = %v, want 700ms read through the Client's trailer", got)
	}

	c2 := mustClient(t, clk, append(noBreakerNoThrottle(), WithPushbackTrailer(false))...)
	_ = c2.UnaryClientInterceptor()(context.Background(), cliMethod, nil, nil, cc, inv.invoke)
	if inv.nopts != 0 {
		t.Errorf("with WithPushbackTrailer(false) the invoker got %d options, want 0", inv.nopts)
	}
	if got := c2.HoldOff(cc.Target()); got != 0 {
		t.Errorf("with WithPushbackTrailer(false): HoldOff() = %v, want 0", got)
	}
}

func TestClientEntryCaps(t *testing.T) {
	clk := clocktest.New(time.Now())
	var mu sync.Mutex
	var made []string
	c := mustClient(t, clk, WithMaxEntries(2, 2), WithThrottle(nil),
		WithBreaker(func(target, method string) []breaker.Option {
			mu.Lock()
			made = append(made, target+" "+method)
			mu.Unlock()
			return nil
		}))
	inv := &fakeInvoker{}
	unary := c.UnaryClientInterceptor()
	a, b, x, y := cliConn(t, "passthrough:///a"), cliConn(t, "passthrough:///b"), cliConn(t, "passthrough:///x"), cliConn(t, "passthrough:///y")
	for _, cc := range []*grpc.ClientConn{a, b, x, y} {
		for _, m := range []string{"/s/1", "/s/2", "/s/3", "/s/4"} {
			if err := unary(context.Background(), m, nil, nil, cc, inv.invoke); err != nil {
				t.Fatalf("call %s %s = %v", cc.Target(), m, err)
			}
		}
	}
	want := []string{
		"passthrough:///a /s/1", "passthrough:///a /s/2", "passthrough:///a *",
		"passthrough:///b /s/1", "passthrough:///b /s/2", "passthrough:///b *",
		"* /s/1", "* /s/2", "* *",
	}
	if fmt.Sprint(made) != fmt.Sprint(want) {
		t.Errorf("breakers made for %v, want %v", made, want)
	}
	if c.Breaker(a.Target(), "/s/3") != nil {
		t.Errorf("breaker.NewGuard(a, /s/3) is not nil, want nil (the method shares the overflow entry)")
	}
	ov := c.Breaker(a.Target(), OverflowName)
	if ov == nil || ov.Snapshot().Successes != 2 {
		t.Errorf("breaker.NewGuard(a, %q) = %v, want the breaker of /s/3 and /s/4 with 2 successes", OverflowName, ov)
	}
	if o := c.Breaker(OverflowName, OverflowName); o == nil || o.Snapshot().Successes != 4 {
		t.Errorf("breaker.NewGuard(%q, %q) = %v, want the breaker of x and y's methods 3 and 4 with 4 successes", OverflowName, OverflowName, o)
	}
	stats := c.Stats()
	if len(stats) != 9*2 {
		t.Errorf("Stats() has %d rows, want 18 (9 pairs × holdoff, breaker)", len(stats))
	}
}

func TestClientCustomGuards(t *testing.T) {
	clk := clocktest.New(time.Now())
	keyed := mustKeyed(t, 1, 1, ratelimit.WithSweepInterval(0))
	bh := mustBulkhead(t, 1)
	c := mustClient(t, clk, noBreakerNoThrottle()...)
	c.o.guards = func(string, string) []admission.Guard {
		return []admission.Guard{ratelimit.NewKeyedGuard("downstream", keyed), bulkhead.NewGuard("slots", bh, 0)}
	}
	a, b := cliConn(t, "passthrough:///a"), cliConn(t, "passthrough:///b")
	inv := &fakeInvoker{}
	unary := c.UnaryClientInterceptor()
	for _, cc := range []*grpc.ClientConn{a, b} {
		if err := unary(context.Background(), cliMethod, nil, nil, cc, inv.invoke); err != nil {
			t.Fatalf("first call to %s = %v, want nil", cc.Target(), err)
		}
	}
	err := unary(context.Background(), cliMethod, nil, nil, a, inv.invoke)
	if !errors.Is(err, ErrClientRefused) || !strings.Contains(err.Error(), "client downstream: "+ratelimit.ReasonKey) {
		t.Errorf("second call to a = %v, want refused by the per-downstream bucket", err)
	}
	if n := bh.InFlight(); n != 0 {
		t.Errorf("bulkhead holds %d slots after the calls, want 0", n)
	}

	// A misconfiguration fails the pair's calls, never sent; it panics not.
	sent := inv.calls
	c.o.guards = func(string, string) []admission.Guard { return make([]admission.Guard, 5) }
	err = unary(context.Background(), "/pkg.Svc/New", nil, nil, a, inv.invoke)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "grpcguard: WithClientGuards: 5 guards") {
		t.Errorf("5 custom guards: call = %v, want INTERNAL naming the count", err)
	}
	c.o.guards = func(string, string) []admission.Guard { return []admission.Guard{nil} }
	err = unary(context.Background(), "/pkg.Svc/Nil", nil, nil, a, inv.invoke)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "is nil") {
		t.Errorf("a nil custom guard: call = %v, want INTERNAL naming it", err)
	}
	if inv.calls != sent {
		t.Errorf("misconfigured pairs sent %d calls, want 0", inv.calls-sent)
	}
}

// clientUnderTest is a Client with breaker, throttle and a target bucket
// that never refuses, as in the benchmarks.
func clientUnderTest(t testing.TB) (*Client, *grpc.ClientConn) {
	c, err := NewClient(WithTargetLimit(ratelimit.Inf, 1))
	if err != nil {
		t.Fatal(err)
	}
	return c, cliConn(t, "passthrough:///inventory")
}

func TestClientUnaryAllocs(t *testing.T) {
	c, cc := clientUnderTest(t)
	unary := c.UnaryClientInterceptor()
	ctx := context.Background()
	inv := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	var md metadata.MD
	mine := grpc.Trailer(&md)
	tests := []struct {
		name string
		opts []grpc.CallOption
	}{
		{"no options", nil},
		{"caller's trailer", []grpc.CallOption{mine}},
		{"other option", []grpc.CallOption{grpc.WaitForReady(true)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_ = unary(ctx, cliMethod, nil, nil, cc, inv, tt.opts...) // create the entry
			if n := testing.AllocsPerRun(1000, func() { _ = unary(ctx, cliMethod, nil, nil, cc, inv, tt.opts...) }); n != 0 {
				t.Errorf("admitted unary call allocates %v times, want 0", n)
			}
		})
	}
	t.Run("breaker open", func(t *testing.T) {
		c.Breaker(cc.Target(), cliMethod).ForceOpen()
		defer c.Breaker(cc.Target(), cliMethod).Reset()
		_ = unary(ctx, cliMethod, nil, nil, cc, inv)
		if n := testing.AllocsPerRun(1000, func() { _ = unary(ctx, cliMethod, nil, nil, cc, inv) }); n != 0 {
			t.Errorf("unary call refused by an open breaker allocates %v times, want 0", n)
		}
	})
}

func TestClientClassifierOverride(t *testing.T) {
	clk := clocktest.New(time.Now())
	strict := func(err error) breaker.Outcome {
		if status.Code(err) == codes.NotFound {
			return breaker.Failure
		}
		return ClassifyError(err)
	}
	c := mustClient(t, clk, WithClassifier(strict), WithBreaker(func(string, string) []breaker.Option {
		return []breaker.Option{breaker.WithCountWindow(2), breaker.WithMinimumCalls(2)}
	}), WithThrottle(func(string, string) []throttle.Option {
		return []throttle.Option{throttle.WithRandom(func() float64 { return 0.999 })} // drops only if P > 0.999
	}))
	cc := cliConn(t, "passthrough:///inventory")
	inv := &fakeInvoker{err: status.Error(codes.NotFound, "no such sku")}
	unary := c.UnaryClientInterceptor()
	for range 2 {
		_ = unary(context.Background(), cliMethod, nil, nil, cc, inv.invoke)
	}
	if s := c.Throttle(cc.Target(), cliMethod).SnapshotAt(clk.Now()); s.Requests != 2 || s.Accepts != 0 {
		t.Errorf("throttle counted %d requests, %d accepts; want 2, 0 (NOT_FOUND is a failure here)", s.Requests, s.Accepts)
	}
	if st := c.Breaker(cc.Target(), cliMethod).StateAt(clk.Now()); st != breaker.StateOpen {
		t.Errorf("breaker state after 2 NOT_FOUND = %v, want open", st)
	}
}

// TestClientConcurrentFirstCalls: many goroutines making the first calls
// of many methods at once all share one entry per method.
func TestClientConcurrentFirstCalls(t *testing.T) {
	const goroutines, methods = 8, 40
	c := mustClient(t, nil, WithThrottle(nil), WithMaxEntries(4, methods/2))
	conns := []*grpc.ClientConn{cliConn(t, "passthrough:///a"), cliConn(t, "passthrough:///b")}
	inv := &fakeInvoker{}
	unary := c.UnaryClientInterceptor()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range methods {
				cc := conns[(g+m)%len(conns)]
				if err := unary(context.Background(), fmt.Sprintf("/s/%d", m), nil, nil, cc, inv.invoke); err != nil {
					t.Errorf("call = %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var total uint64
	for _, cc := range conns {
		own := 0 // the first methods to arrive get their own breaker
		for m := range methods {
			if b := c.Breaker(cc.Target(), fmt.Sprintf("/s/%d", m)); b != nil {
				own++
				total += b.Snapshot().Successes
			}
		}
		if own != methods/2 {
			t.Errorf("%s: %d methods have their own breaker, want %d (the cap)", cc.Target(), own, methods/2)
		}
		total += c.Breaker(cc.Target(), OverflowName).Snapshot().Successes
	}
	if total != goroutines*methods {
		t.Errorf("breakers recorded %d calls, want %d: every call finished at the one breaker of its pair", total, goroutines*methods)
	}
	if rows := len(c.Stats()); rows != 2*(methods/2+1)*2 {
		t.Errorf("Stats() has %d rows, want %d", rows, 2*(methods/2+1)*2)
	}
}

// TestNewClientReportsEveryBadOption: the options only record; NewClient
// names every bad one at once.
func TestNewClientReportsEveryBadOption(t *testing.T) {
	c, err := NewClient(WithTargetLimit(-1, 0), WithMaxHoldOff(-time.Second), WithClassifier(nil))
	if c != nil || err == nil {
		t.Fatalf("NewClient() = %v, %v; want nil and an error", c, err)
	}
	for _, want := range []string{"WithTargetLimit", "WithMaxHoldOff", "WithClassifier"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NewClient() error %q does not name %s", err, want)
		}
	}
}

// TestClientRecoveryAfterIncident: after an incident the throttle's window
// holds only failures. It neither starves the breaker's half-open probes
// nor, once they have closed the breaker, goes on dropping calls.
func TestClientRecoveryAfterIncident(t *testing.T) {
	clk := clocktest.New(time.Now())
	c := mustClient(t, clk,
		WithBreaker(func(string, string) []breaker.Option {
			return []breaker.Option{breaker.WithCountWindow(4), breaker.WithMinimumCalls(4), breaker.WithFailureRate(50),
				breaker.WithWaitInOpen(time.Second), breaker.WithHalfOpenCalls(2)}
		}),
		WithThrottle(func(string, string) []throttle.Option {
			// drop when P > 0.75, from the first request: 4 failures are enough
			return []throttle.Option{throttle.WithWindow(3*time.Second, 10), throttle.WithRandom(func() float64 { return 0.75 }), throttle.WithMinRequests(0)}
		}))
	cc := cliConn(t, "passthrough:///inventory")
	unary := c.UnaryClientInterceptor()
	call := func() error { return unary(context.Background(), cliMethod, nil, nil, cc, (&fakeInvoker{}).invoke) }
	inv := &fakeInvoker{err: status.Error(codes.Unavailable, "down")}
	send := func() error { return unary(context.Background(), cliMethod, nil, nil, cc, inv.invoke) }

	// The incident: 4 failures open the breaker; the throttle's window holds
	// them (P = 4/5), but while the breaker is open the throttle defers to
	// it: the next call is refused by the breaker, not dropped by the
	// throttle.
	for range 4 {
		if err := send(); status.Code(err) != codes.Unavailable || errors.Is(err, ErrClientRefused) {
			t.Fatalf("incident call = %v, want the server's UNAVAILABLE", err)
		}
		clk.Advance(10 * time.Millisecond)
	}
	if err := call(); !errors.Is(err, breaker.ErrOpen) || errors.Is(err, throttle.ErrThrottled) {
		t.Fatalf("after 4 failures: call = %v, want refused by the open breaker", err)
	}
	thr := c.Throttle(cc.Target(), cliMethod)
	if p := thr.ProbabilityAt(clk.Now()); p < 0.79 {
		t.Fatalf("after 4 failures: throttle P = %v, want 0.8", p)
	}

	// The downstream is back. After the breaker's wait its two probes go
	// through although the throttle still remembers the failures...
	inv.set(nil, nil)
	clk.Advance(time.Second)
	for i := range 2 {
		if err := send(); err != nil {
			t.Fatalf("half-open probe %d = %v, want sent and answered", i, err)
		}
	}
	if st := c.Breaker(cc.Target(), cliMethod).StateAt(clk.Now()); st != breaker.StateClosed {
		t.Fatalf("after 2 successful probes: breaker %v, want closed", st)
	}
	// ...and once they have closed the breaker the throttle has forgotten
	// the incident: every call is sent, although the 4 failures are still
	// within its 3-second window.
	if p := thr.ProbabilityAt(clk.Now()); p != 0 {
		t.Fatalf("after the breaker closed: throttle P = %v, want 0", p)
	}
	before := inv.count()
	for range 20 {
		if err := send(); err != nil {
			t.Fatalf("after recovery: call = %v, want sent", err)
		}
	}
	if n := inv.count() - before; n != 20 {
		t.Fatalf("after recovery: %d of 20 calls sent, want all", n)
	}
}

// TestClientOpenProbes: by default a Client's open breaker lets one call
// in DefaultOpenProbes through as a probe, past the throttle, whose window
// then holds only failures; the first probe that succeeds ends the wait in
// open (a minute here) and, through half-open, closes the breaker and
// resets the throttle within a few calls of the downstream's return.
func TestClientOpenProbes(t *testing.T) {
	clk := clocktest.New(time.Now())
	c := mustClient(t, clk,
		WithBreaker(func(string, string) []breaker.Option {
			return []breaker.Option{breaker.WithCountWindow(4), breaker.WithMinimumCalls(4), breaker.WithFailureRate(50),
				breaker.WithWaitInOpen(time.Minute), breaker.WithHalfOpenCalls(2)}
		}),
		WithThrottle(func(string, string) []throttle.Option {
			// drop when P > 0.75, from the first request: the 7 failures
			// below would have it drop, were it not deferring to the breaker
			return []throttle.Option{throttle.WithRandom(func() float64 { return 0.75 }), throttle.WithMinRequests(0)}
		}))
	cc := cliConn(t, "passthrough:///inventory")
	unary := c.UnaryClientInterceptor()
	inv := &fakeInvoker{err: status.Error(codes.Unavailable, "down")}
	send := func() error {
		clk.Advance(time.Millisecond)
		return unary(context.Background(), cliMethod, nil, nil, cc, inv.invoke)
	}
	for range 4 {
		if err := send(); status.Code(err) != codes.Unavailable || errors.Is(err, ErrClientRefused) {
			t.Fatalf("incident call = %v, want the server's UNAVAILABLE", err)
		}
	}
	brk, thr := c.Breaker(cc.Target(), cliMethod), c.Throttle(cc.Target(), cliMethod)
	if st := brk.StateAt(clk.Now()); st != breaker.StateOpen {
		t.Fatalf("after 4 failures: breaker %v, want open", st)
	}

	// Still down: one call in DefaultOpenProbes reaches it, and fails;
	// the others are refused by the breaker, none by the throttle.
	before := inv.count()
	for i := 1; i <= 3*DefaultOpenProbes; i++ {
		err := send()
		if i%DefaultOpenProbes == 0 {
			if status.Code(err) != codes.Unavailable || errors.Is(err, ErrClientRefused) {
				t.Fatalf("open, call %d = %v, want a probe answered by the server", i, err)
			}
			continue
		}
		if !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("open, call %d = %v, want refused by the breaker", i, err)
		}
	}
	if n := inv.count() - before; n != 3 {
		t.Fatalf("open, %d calls: %d reached the server, want 3", 3*DefaultOpenProbes, n)
	}
	if s := thr.SnapshotAt(clk.Now()); s.Throttled != 0 || s.Requests != 7 || s.Accepts != 0 {
		t.Fatalf("throttle: %d dropped, window %d requests %d accepts; want 0 dropped, 7 and 0", s.Throttled, s.Requests, s.Accepts)
	}

	// Back: the next probe finds it so, then the two half-open probes
	// close the breaker, well within its minute of wait in open.
	inv.set(nil, nil)
	refused := 0
	for i := 1; i <= DefaultOpenProbes+2; i++ {
		if err := send(); err != nil {
			if !errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("recovery, call %d = %v, want sent, or refused by the breaker", i, err)
			}
			refused++
		}
	}
	if refused != DefaultOpenProbes-1 {
		t.Errorf("after the downstream's return: %d calls refused, want %d", refused, DefaultOpenProbes-1)
	}
	if st := brk.StateAt(clk.Now()); st != breaker.StateClosed {
		t.Fatalf("after a probe and 2 half-open calls succeeded: breaker %v, want closed", st)
	}
	if p := thr.ProbabilityAt(clk.Now()); p != 0 {
		t.Fatalf("after the breaker closed: throttle P = %v, want 0", p)
	}
	before = inv.count()
	for i := range 20 {
		if err := send(); err != nil {
			t.Fatalf("after recovery, call %d = %v, want sent", i, err)
		}
	}
	if n := inv.count() - before; n != 20 {
		t.Fatalf("after recovery: %d of 20 calls sent, want all", n)
	}
}
