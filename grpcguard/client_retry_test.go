package grpcguard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/internal/clock/clocktest"
	"github.com/levee-go/levee/retrybudget"
)

// scriptInvoker answers the n-th call (0-based) with errs[n], or nil past
// the end, and the pushback trailer trailers[n] if any.
type scriptInvoker struct {
	mu       sync.Mutex
	errs     []error
	trailers []string
	calls    int
}

func (s *scriptInvoker) invoke(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.calls
	s.calls++
	if n < len(s.trailers) && s.trailers[n] != "" {
		for _, o := range opts {
			if t, ok := o.(grpc.TrailerCallOption); ok {
				*t.TrailerAddr = metadata.Pairs(PushbackTrailer, s.trailers[n])
			}
		}
	}
	if n < len(s.errs) {
		return s.errs[n]
	}
	return nil
}

// waits records the retry waits of a Client instead of sleeping.
type waits struct {
	mu  sync.Mutex
	got []time.Duration
}

func (w *waits) wait(_ context.Context, d time.Duration) bool {
	w.mu.Lock()
	w.got = append(w.got, d)
	w.mu.Unlock()
	return true
}

func retryClient(t testing.TB, opts ...ClientOption) (*Client, *waits) {
	t.Helper()
	c := mustClient(t, nil, opts...)
	w := &waits{}
	c.wait = w.wait
	c.jitter = func() float64 { return 0.5 }
	return c, w
}

func TestClientRetries(t *testing.T) {
	refused := withRetryInfo(codes.ResourceExhausted, 20*time.Millisecond)
	unavailable := status.Error(codes.Unavailable, "connection reset")
	upstream := UpstreamOverloaded(context.Background(), refused)
	noBudget := WithRetryBudget(nil)
	tests := []struct {
		name      string
		opts      []ClientOption
		errs      []error
		trailers  []string
		deadline  time.Duration // 0: none
		wantErr   error         // nil: success
		wantCalls int
		wantWaits []time.Duration
	}{
		{name: "no retries by default", opts: []ClientOption{noBudget}, errs: []error{refused}, wantErr: refused, wantCalls: 1},
		{name: "RetryInfo delay, then success", opts: []ClientOption{WithRetries(3), noBudget}, errs: []error{refused, refused},
			wantCalls: 3, wantWaits: []time.Duration{20 * time.Millisecond, 20 * time.Millisecond}},
		{name: "pushback trailer before RetryInfo", opts: []ClientOption{WithRetries(2), noBudget}, errs: []error{refused}, trailers: []string{"7"},
			wantCalls: 2, wantWaits: []time.Duration{7 * time.Millisecond}},
		{name: "backoff with full jitter", opts: []ClientOption{WithRetries(4), noBudget, WithRetryBackoff(10*time.Millisecond, 30*time.Millisecond)},
			errs: []error{unavailable, unavailable, unavailable}, wantCalls: 4,
			wantWaits: []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 15 * time.Millisecond}},
		{name: "attempts exhausted: the last error", opts: []ClientOption{WithRetries(2), noBudget}, errs: []error{unavailable, refused},
			wantErr: refused, wantCalls: 2, wantWaits: []time.Duration{25 * time.Millisecond}},
		{name: "negative pushback: no retry", opts: []ClientOption{WithRetries(3), noBudget}, errs: []error{refused}, trailers: []string{"-1"},
			wantErr: refused, wantCalls: 1},
		{name: "upstream overloaded: no retry", opts: []ClientOption{WithRetries(3), noBudget}, errs: []error{upstream},
			wantErr: upstream, wantCalls: 1},
		{name: "application error: no retry", opts: []ClientOption{WithRetries(3), noBudget}, errs: []error{status.Error(codes.NotFound, "x")},
			wantErr: status.Error(codes.NotFound, "x"), wantCalls: 1},
		{name: "deadline exceeded: no retry", opts: []ClientOption{WithRetries(3), noBudget}, errs: []error{status.Error(codes.DeadlineExceeded, "x")},
			wantErr: status.Error(codes.DeadlineExceeded, "x"), wantCalls: 1},
		{name: "message too large: no retry", opts: []ClientOption{WithRetries(3), noBudget}, errs: []error{status.Error(codes.ResourceExhausted, "grpc: received message larger than max")},
			wantErr: status.Error(codes.ResourceExhausted, "grpc: received message larger than max"), wantCalls: 1},
		{name: "wait past the deadline: no retry", opts: []ClientOption{WithRetries(3), noBudget}, errs: []error{refused}, deadline: 10 * time.Millisecond,
			wantErr: refused, wantCalls: 1},
		{name: "budget refuses: the original error", opts: []ClientOption{WithRetries(3)}, errs: []error{refused},
			wantErr: refused, wantCalls: 1},
		{name: "budget's minimum grants one", opts: []ClientOption{WithRetries(3), WithRetryBudget(func(string) []retrybudget.Option {
			return []retrybudget.Option{retrybudget.WithMinRetries(1)}
		})}, errs: []error{refused, refused}, wantErr: refused, wantCalls: 2, wantWaits: []time.Duration{20 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := append([]ClientOption{WithBreaker(nil), WithThrottle(nil), WithMaxHoldOff(0)}, tt.opts...)
			c, w := retryClient(t, opts...)
			inv := &scriptInvoker{errs: tt.errs, trailers: tt.trailers}
			ctx := context.Background()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			err := c.UnaryClientInterceptor()(ctx, cliMethod, nil, nil, cliConn(t, "passthrough:///inventory"), inv.invoke)
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && (err == nil || err.Error() != tt.wantErr.Error()) {
				t.Errorf("call = %v, want %v", err, tt.wantErr)
			}
			if inv.calls != tt.wantCalls {
				t.Errorf("%d attempts sent, want %d", inv.calls, tt.wantCalls)
			}
			if len(w.got) != len(tt.wantWaits) || !equalDurations(w.got, tt.wantWaits) {
				t.Errorf("waits %v, want %v", w.got, tt.wantWaits)
			}
		})
	}
}

func equalDurations(a, b []time.Duration) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// A retry waits out the target's hold-off, and a retry that a guard
// refuses ends with the server's answer, not the local refusal.
func TestClientRetryGuarded(t *testing.T) {
	t.Run("waits out the hold-off", func(t *testing.T) {
		c, w := retryClient(t, WithRetries(2), WithRetryBudget(nil), WithBreaker(nil), WithThrottle(nil))
		clk := clocktest.New(time.Now())
		c.clock.Fake = clk.Now
		w2 := func(ctx context.Context, d time.Duration) bool { clk.Advance(d); return w.wait(ctx, d) }
		c.wait = w2
		// The server asks for 30ms in its trailer; its RetryInfo says 5ms.
		inv := &scriptInvoker{errs: []error{withRetryInfo(codes.Unavailable, 5*time.Millisecond)}, trailers: []string{"30"}}
		if err := c.UnaryClientInterceptor()(context.Background(), cliMethod, nil, nil, cliConn(t, "passthrough:///inventory"), inv.invoke); err != nil {
			t.Fatalf("call = %v, want the retry's success", err)
		}
		if !equalDurations(w.got, []time.Duration{30 * time.Millisecond}) || inv.calls != 2 {
			t.Fatalf("waits %v and %d attempts, want [30ms] and 2", w.got, inv.calls)
		}
	})
	t.Run("a server delay beyond the hold-off's cap", func(t *testing.T) {
		// A pushback of a day: the call, which has no deadline, waits the
		// hold-off's cap, not a day; with holding off disabled, the
		// default cap.
		for _, tc := range []struct {
			maxHoldOff, want time.Duration
		}{{time.Second, time.Second}, {0, DefaultMaxHoldOff}} {
			c, w := retryClient(t, WithRetries(2), WithRetryBudget(nil), WithBreaker(nil), WithThrottle(nil), WithMaxHoldOff(tc.maxHoldOff))
			clk := clocktest.New(time.Now())
			c.clock.Fake = clk.Now
			c.wait = func(ctx context.Context, d time.Duration) bool { clk.Advance(d); return w.wait(ctx, d) }
			inv := &scriptInvoker{errs: []error{status.Error(codes.Unavailable, "overloaded")}, trailers: []string{"86400000"}}
			if err := c.UnaryClientInterceptor()(context.Background(), cliMethod, nil, nil, cliConn(t, "passthrough:///inventory"), inv.invoke); err != nil {
				t.Fatalf("WithMaxHoldOff(%v): call = %v, want the retry's success", tc.maxHoldOff, err)
			}
			if !equalDurations(w.got, []time.Duration{tc.want}) || inv.calls != 2 {
				t.Errorf("WithMaxHoldOff(%v): waits %v and %d attempts, want [%v] and 2", tc.maxHoldOff, w.got, inv.calls, tc.want)
			}
		}
	})
	t.Run("a deadline too near on the client's clock", func(t *testing.T) {
		// The client's clock is an hour ahead of the wall's: the call's
		// deadline, 10ms after the client's now, leaves no room for a
		// 30ms pushback. (time.Until read the wall clock, saw an hour
		// left, and retried.)
		c, w := retryClient(t, WithRetries(2), WithRetryBudget(nil), WithBreaker(nil), WithThrottle(nil))
		clk := clocktest.New(time.Now().Add(time.Hour))
		c.clock.Fake = clk.Now
		ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(10*time.Millisecond))
		defer cancel()
		inv := &scriptInvoker{errs: []error{withRetryInfo(codes.Unavailable, 5*time.Millisecond)}, trailers: []string{"30"}}
		if err := c.UnaryClientInterceptor()(ctx, cliMethod, nil, nil, cliConn(t, "passthrough:///inventory"), inv.invoke); status.Code(err) != codes.Unavailable {
			t.Fatalf("call = %v, want the server's UNAVAILABLE, not retried", err)
		}
		if len(w.got) != 0 || inv.calls != 1 {
			t.Fatalf("waits %v and %d attempts, want none and 1", w.got, inv.calls)
		}
	})
	t.Run("a breaker refuses the retry", func(t *testing.T) {
		c, _ := retryClient(t, WithRetries(3), WithRetryBudget(nil), WithThrottle(nil), WithMaxHoldOff(0),
			WithBreaker(func(string, string) []breaker.Option {
				return []breaker.Option{breaker.WithCountWindow(1), breaker.WithMinimumCalls(1)}
			}))
		refused := withRetryInfo(codes.ResourceExhausted, time.Millisecond)
		inv := &scriptInvoker{errs: []error{refused}}
		err := c.UnaryClientInterceptor()(context.Background(), cliMethod, nil, nil, cliConn(t, "passthrough:///inventory"), inv.invoke)
		if err != refused || errors.Is(err, ErrClientRefused) {
			t.Fatalf("call = %v, want the server's refusal %v", err, refused)
		}
		if inv.calls != 1 {
			t.Fatalf("%d attempts sent, want 1 (the open breaker refused the retry)", inv.calls)
		}
	})
	t.Run("a local refusal is not retried", func(t *testing.T) {
		c, w := retryClient(t, WithRetries(3), WithRetryBudget(nil), WithThrottle(nil))
		cc := cliConn(t, "passthrough:///inventory")
		inv := &scriptInvoker{}
		_ = c.UnaryClientInterceptor()(context.Background(), cliMethod, nil, nil, cc, inv.invoke)
		c.Breaker(cc.Target(), cliMethod).ForceOpen()
		err := c.UnaryClientInterceptor()(context.Background(), cliMethod, nil, nil, cc, inv.invoke)
		if !errors.Is(err, breaker.ErrOpen) || len(w.got) != 0 || inv.calls != 1 {
			t.Fatalf("call = %v after %d waits and %d attempts; want breaker.ErrOpen, no wait, 1 attempt (the first call)", err, len(w.got), inv.calls)
		}
	})
}

// The budget is per target: the retries of one target do not spend
// another's.
func TestClientRetryBudgetPerTarget(t *testing.T) {
	c, _ := retryClient(t, WithRetries(2), WithBreaker(nil), WithThrottle(nil), WithMaxHoldOff(0))
	unary := c.UnaryClientInterceptor()
	a, b := cliConn(t, "passthrough:///a"), cliConn(t, "passthrough:///b")
	ok := &scriptInvoker{}
	for range 20 {
		_ = unary(context.Background(), cliMethod, nil, nil, a, ok.invoke)
	}
	refused := withRetryInfo(codes.ResourceExhausted, time.Millisecond)
	for _, tc := range []struct {
		cc        *grpc.ClientConn
		wantCalls int
	}{{a, 2}, {a, 2}, {a, 1}, {b, 1}} {
		inv := &scriptInvoker{errs: []error{refused, refused}}
		_ = unary(context.Background(), cliMethod, nil, nil, tc.cc, inv.invoke)
		if inv.calls != tc.wantCalls {
			t.Errorf("%s: %d attempts, want %d (20 calls sent to a allow a 10%% budget of 2)", tc.cc.Target(), inv.calls, tc.wantCalls)
		}
	}
}

func TestClientRetryAllocs(t *testing.T) {
	c, _ := retryClient(t, WithRetries(3), WithBreaker(nil), WithThrottle(nil))
	cc := cliConn(t, "passthrough:///inventory")
	unary := c.UnaryClientInterceptor()
	ctx := context.Background()
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	_ = unary(ctx, cliMethod, nil, nil, cc, ok)
	if n := testing.AllocsPerRun(1000, func() { _ = unary(ctx, cliMethod, nil, nil, cc, ok) }); n != 0 {
		t.Errorf("admitted call counted by the retry budget allocates %v times, want 0", n)
	}
	// A refusal whose retry the budget refuses fails with the server's
	// error, allocating nothing.
	c, _ = retryClient(t, WithRetries(3), WithBreaker(nil), WithThrottle(nil), WithRetryBudget(func(string) []retrybudget.Option {
		return []retrybudget.Option{retrybudget.WithRatio(0)}
	}))
	unary = c.UnaryClientInterceptor()
	refused := status.Error(codes.Unavailable, "busy")
	fail := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return refused }
	_ = unary(ctx, cliMethod, nil, nil, cc, fail)
	if n := testing.AllocsPerRun(1000, func() {
		if err := unary(ctx, cliMethod, nil, nil, cc, fail); err != refused {
			t.Fatalf("call = %v, want %v", err, refused)
		}
	}); n != 0 {
		t.Errorf("retry refused by the budget allocates %v times, want 0", n)
	}
	t1, _ := c.targets.get(cc.Target())
	if s := t1.budget.Snapshot(); s.Refused < 1000 || s.Granted != 0 {
		t.Errorf("budget snapshot %+v, want every retry refused", s)
	}
}

func TestNewClientRejectsBadRetryOptions(t *testing.T) {
	tests := []struct {
		name string
		give []ClientOption
		want []string
	}{
		{name: "zero attempts", give: []ClientOption{WithRetries(0)}, want: []string{"WithRetries", "got 0"}},
		{name: "too many attempts", give: []ClientOption{WithRetries(11)}, want: []string{"WithRetries", "got 11"}},
		{name: "zero backoff", give: []ClientOption{WithRetryBackoff(0, time.Second)}, want: []string{"WithRetryBackoff", "got 0s and 1s"}},
		{name: "backoff above its max", give: []ClientOption{WithRetryBackoff(2*time.Second, time.Second)}, want: []string{"WithRetryBackoff", "got 2s and 1s"}},
		{name: "both", give: []ClientOption{WithRetries(-1), WithRetryBackoff(-1, -2)}, want: []string{"WithRetries", "WithRetryBackoff"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewClient(tt.give...)
			if c != nil || err == nil {
				t.Fatalf("NewClient() = %v, %v; want nil and an error", c, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NewClient() error %q does not contain %q", err, w)
				}
			}
		})
	}
	// A budget retrybudget.New refuses fails the target's calls, unsent.
	c := mustClient(t, nil, WithRetries(2), WithRetryBudget(func(string) []retrybudget.Option {
		return []retrybudget.Option{retrybudget.WithRatio(-1)}
	}))
	inv := &scriptInvoker{}
	err := c.UnaryClientInterceptor()(context.Background(), cliMethod, nil, nil, cliConn(t, "passthrough:///inventory"), inv.invoke)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "WithRetryBudget") || inv.calls != 0 {
		t.Fatalf("call with a bad budget = %v after %d attempts, want INTERNAL naming WithRetryBudget and none sent", err, inv.calls)
	}
}

func TestUpstreamOverloaded(t *testing.T) {
	tests := []struct {
		name string
		give error
		want bool // mapped to the answer
	}{
		{name: "server refusal", give: withRetryInfo(codes.ResourceExhausted, time.Second), want: true},
		{name: "unavailable", give: status.Error(codes.Unavailable, "x"), want: true},
		{name: "deadline", give: status.Error(codes.DeadlineExceeded, "x"), want: true},
		{name: "context deadline", give: context.DeadlineExceeded, want: true},
		{name: "client refusal", give: &clientRefusal{st: status.New(codes.Unavailable, "levee: client breaker"), msg: "x"}, want: true},
		{name: "local refusal of another guard", give: localErr{}, want: true},
		{name: "upstream answer passes on", give: UpstreamOverloaded(context.Background(), status.Error(codes.Unavailable, "x")), want: true},
		{name: "message too large", give: status.Error(codes.ResourceExhausted, "grpc: received message larger than max (9 vs. 4)")},
		{name: "not found", give: status.Error(codes.NotFound, "x")},
		{name: "canceled", give: status.Error(codes.Canceled, "x")},
		{name: "nil", give: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := UpstreamOverloaded(context.Background(), tt.give)
			if !tt.want {
				if got != tt.give {
					t.Fatalf("UpstreamOverloaded(%v) = %v, want it unchanged", tt.give, got)
				}
				return
			}
			st := status.Convert(got)
			if st.Code() != codes.Unavailable || !strings.HasPrefix(st.Message(), "levee: downstream overloaded: ") {
				t.Fatalf("UpstreamOverloaded(%v) = %v, want UNAVAILABLE, levee: downstream overloaded", tt.give, got)
			}
			if !IsUpstreamOverloaded(got) || retryable(got) {
				t.Fatalf("UpstreamOverloaded(%v): IsUpstreamOverloaded %v, retryable %v; want true, false", tt.give, IsUpstreamOverloaded(got), retryable(got))
			}
			if _, ok := RetryDelay(got); ok {
				t.Fatalf("UpstreamOverloaded(%v) carries a RetryInfo", tt.give)
			}
			var info *errdetails.ErrorInfo
			for _, d := range st.Details() {
				if ei, ok := d.(*errdetails.ErrorInfo); ok {
					info = ei
				}
			}
			if info == nil || info.GetReason() != ReasonUpstreamOverloaded || info.GetDomain() != ErrorDomain || info.GetMetadata()["downstream_code"] == "" {
				t.Fatalf("UpstreamOverloaded(%v) ErrorInfo = %v, want reason %s in %s naming the downstream code", tt.give, info, ReasonUpstreamOverloaded, ErrorDomain)
			}
		})
	}
}

// keyGuard records the Key of the calls it admits.
type keyGuard struct {
	mu   sync.Mutex
	keys []string
}

func (g *keyGuard) Name() string { return "keys" }
func (g *keyGuard) Admit(c admission.Call) admission.Decision {
	g.mu.Lock()
	g.keys = append(g.keys, c.Key)
	g.mu.Unlock()
	return admission.Decision{}
}
func (g *keyGuard) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// Guards of your own see the call's target as its Key, each attempt's,
// even a target beyond WithMaxEntries's cap that shares the overflow entry.
func TestClientGuardsSeeTheTarget(t *testing.T) {
	for _, attempts := range []int{1, 2} {
		g := &keyGuard{}
		c, _ := retryClient(t, WithRetries(attempts), WithRetryBudget(nil), WithBreaker(nil), WithThrottle(nil), WithMaxHoldOff(0),
			WithMaxEntries(1, 4), WithClientGuards(func(string, string) []admission.Guard { return []admission.Guard{g} }))
		refused := status.Error(codes.Unavailable, "busy")
		for _, target := range []string{"passthrough:///a", "passthrough:///b"} {
			inv := &scriptInvoker{errs: []error{refused}}
			_ = c.UnaryClientInterceptor()(context.Background(), cliMethod, nil, nil, cliConn(t, target), inv.invoke)
		}
		want := []string{"passthrough:///a", "passthrough:///b"}
		if attempts == 2 {
			want = []string{"passthrough:///a", "passthrough:///a", "passthrough:///b", "passthrough:///b"}
		}
		if strings.Join(g.keys, " ") != strings.Join(want, " ") {
			t.Errorf("%d attempts: guard saw keys %v, want %v", attempts, g.keys, want)
		}
	}
}
