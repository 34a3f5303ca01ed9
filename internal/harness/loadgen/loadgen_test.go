package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ok(context.Context) error { return nil }

// newTestGen returns a generator on a fake clock.
func newTestGen(t *testing.T, call CallFunc, phases []Phase, opts ...Option) (*Generator, *fakeClock) {
	t.Helper()
	g, err := New(call, phases, opts...)
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	c := newFakeClock()
	g.clock = c
	return g, c
}

// runAsync starts g.Run and returns a function that waits for its result.
func runAsync(ctx context.Context, g *Generator) func() (*Result, error) {
	type out struct {
		res *Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		res, err := g.Run(ctx)
		ch <- out{res, err}
	}()
	return func() (*Result, error) {
		o := <-ch
		return o.res, o.err
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	good := []Phase{{Name: "a", Duration: time.Second, Rate: 1}}
	tests := []struct {
		name   string
		call   CallFunc
		phases []Phase
		opts   []Option
		want   string
	}{
		{name: "nil call", phases: good, want: "call must not be nil"},
		{name: "no phases", call: ok, want: "at least one phase"},
		{name: "negative duration", call: ok, phases: []Phase{{Name: "spike", Duration: -time.Second, Rate: 1}}, want: `phase 0 "spike": duration must be > 0, got -1s`},
		{name: "zero duration", call: ok, phases: []Phase{{Name: "x", Rate: 1}}, want: "duration must be > 0"},
		{name: "negative rate", call: ok, phases: []Phase{{Name: "x", Duration: time.Second, Rate: -1}}, want: "rate must be a finite number >= 0, got -1"},
		{name: "NaN rate", call: ok, phases: []Phase{{Name: "x", Duration: time.Second, Rate: math.NaN()}}, want: "rate must be"},
		{name: "zero deadline", call: ok, phases: good, opts: []Option{WithDeadline(0)}, want: "deadline must be > 0"},
		{name: "zero max in flight", call: ok, phases: good, opts: []Option{WithMaxInFlight(0)}, want: "max in flight must be >= 1, got 0"},
		{name: "bad arrivals", call: ok, phases: good, opts: []Option{WithArrivals(7)}, want: "unknown arrivals"},
		{name: "negative clumps", call: ok, phases: good, opts: []Option{WithClumps(-time.Millisecond)}, want: "clumps must be >= 0, got -1ms"},
		{name: "negative backoff", call: ok, phases: good, opts: []Option{WithRetry(RetryPolicy{Backoff: -1})}, want: "retry backoff must be >= 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.call, tt.phases, tt.opts...)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("New() error = %v, want one wrapping ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "loadgen: ") {
				t.Errorf("New() error = %q, want it to start with \"loadgen: \" and contain %q", err, tt.want)
			}
		})
	}
}

// TestOpenLoopSlowCallsDoNotDelaySchedule shows the generator is open
// loop: calls that never return do not hold back the next start. Every
// 10ms of (fake) time exactly one more call starts while none has
// finished, and latencies count from the scheduled start.
func TestOpenLoopSlowCallsDoNotDelaySchedule(t *testing.T) {
	release := make(chan struct{})
	var started, finished atomic.Int64
	call := func(ctx context.Context) error {
		started.Add(1)
		defer finished.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	g, clk := newTestGen(t, call, []Phase{{Name: "steady", Duration: time.Second, Rate: 100}}, WithDeadline(time.Hour))
	wait := runAsync(context.Background(), g)

	for step := int64(1); step <= 100; step++ {
		waitFor(t, fmt.Sprintf("call %d to start and the scheduler to wait", step), func() bool {
			return started.Load() == step && clk.pending() == 1
		})
		if got := finished.Load(); got != 0 {
			t.Fatalf("after %d starts, finished = %d, want 0 (calls are still blocked)", step, got)
		}
		clk.Advance(10 * time.Millisecond)
	}
	// The clock is at 1s, the end of the schedule: 100 calls in flight.
	if got := started.Load(); got != 100 {
		t.Fatalf("started = %d at the end of the schedule, want 100", got)
	}
	close(release)
	res, err := wait()
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	if res.Total.Offered != 100 || res.Total.Succeeded != 100 || res.Total.Dropped != 0 {
		t.Errorf("Total = offered %d, succeeded %d, dropped %d; want 100, 100, 0", res.Total.Offered, res.Total.Succeeded, res.Total.Dropped)
	}
	// Every request started exactly on schedule.
	if lag := res.StartLag; lag.Count != 100 || lag.Max > time.Microsecond {
		t.Errorf("StartLag count/max = %d/%v, want 100/≤1µs (on schedule)", lag.Count, lag.Max)
	}
	// All calls answered at t=1s; the call scheduled at k*10ms waited 1s-k*10ms.
	lat := res.Total.Success
	if !near(lat.Max, time.Second, 0.01) || !near(lat.Min, 10*time.Millisecond, 0.01) || !near(lat.P50, 500*time.Millisecond, 0.03) {
		t.Errorf("Success latency min/p50/max = %v/%v/%v, want about 10ms/500ms/1s", lat.Min, lat.P50, lat.Max)
	}
}

func near(got, want time.Duration, tol float64) bool {
	return math.Abs(float64(got-want)) <= tol*float64(want)
}

// TestWaitsPreciselyNearStart checks the scheduler's waiting: a Go timer
// until preciseWindow before the next start, then a precise sleep.
func TestWaitsPreciselyNearStart(t *testing.T) {
	var started atomic.Int64
	call := func(context.Context) error { started.Add(1); return nil }
	g, clk := newTestGen(t, call, []Phase{{Name: "p", Duration: 30 * time.Millisecond, Rate: 100}})
	wait := runAsync(context.Background(), g)
	for i := int64(1); i <= 3; i++ {
		waitFor(t, "the timer wait", func() bool { return started.Load() == i && clk.pending() == 1 })
		clk.Advance(8 * time.Millisecond)
		waitFor(t, "the precise sleep", func() bool { return clk.pending() == 1 && len(clk.asked()) == int(2*i) })
		if got := started.Load(); got != i {
			t.Fatalf("started = %d 2ms before request %d is due, want %d", got, i+1, i)
		}
		clk.Advance(2 * time.Millisecond)
	}
	if _, err := wait(); err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	want := []string{"after 8ms", "sleep 2ms", "after 8ms", "sleep 2ms", "after 8ms", "sleep 2ms"}
	if got := clk.asked(); !reflect.DeepEqual(got, want) {
		t.Errorf("waits = %q, want %q", got, want)
	}
}

// TestBehindScheduleCatchesUp shows that when the scheduler wakes late it
// issues every overdue request at once, each timed from its own slot.
func TestBehindScheduleCatchesUp(t *testing.T) {
	g, clk := newTestGen(t, ok, []Phase{{Name: "p", Duration: time.Second, Rate: 100}})
	var done atomic.Int64
	g.testHookDone = func() { done.Add(1) }
	wait := runAsync(context.Background(), g)
	waitFor(t, "first call and scheduler to wait", func() bool { return done.Load() == 1 && clk.pending() == 1 })
	clk.Advance(time.Second)
	res, err := wait()
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	if res.Total.Offered != 100 || res.Total.Succeeded != 100 {
		t.Errorf("Total offered/succeeded = %d/%d, want 100/100", res.Total.Offered, res.Total.Succeeded)
	}
	// The request scheduled at 10ms ran at 1s: 990ms late.
	if lat := res.Total.Success; !near(lat.Max, 990*time.Millisecond, 0.01) {
		t.Errorf("Success.Max = %v, want about 990ms", lat.Max)
	}
	// And the generator reports its own lateness.
	if lag := res.Phases[0].StartLag; lag.Count != 100 || !near(lag.Max, 990*time.Millisecond, 0.01) || lag.Min > time.Microsecond {
		t.Errorf("Phases[0].StartLag count/min/max = %d/%v/%v, want 100/≤1µs/about 990ms", lag.Count, lag.Min, lag.Max)
	}
	if res.StartLag.Count != 100 {
		t.Errorf("StartLag.Count = %d, want 100", res.StartLag.Count)
	}
}

func TestMaxInFlightDropsAreCounted(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int64
	call := func(ctx context.Context) error {
		started.Add(1)
		<-release
		return nil
	}
	g, clk := newTestGen(t, call, []Phase{{Name: "p", Duration: time.Second, Rate: 100}}, WithMaxInFlight(10))
	wait := runAsync(context.Background(), g)
	waitFor(t, "scheduler to wait", func() bool { return clk.pending() == 1 })
	// Wake the scheduler late: it issues the 99 overdue requests at once and
	// waits again for the end of the phase.
	clk.Advance(999 * time.Millisecond)
	waitFor(t, "10 calls to start and the scheduler to wait", func() bool { return started.Load() == 10 && clk.pending() == 1 })
	close(release)
	clk.Advance(time.Millisecond)
	res, err := wait()
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	if got := started.Load(); got != 10 {
		t.Errorf("started = %d, want 10", got)
	}
	want := Stats{Offered: 100, Dropped: 90, Succeeded: 10}
	if got := res.Total; got.Offered != want.Offered || got.Dropped != want.Dropped || got.Succeeded != want.Succeeded {
		t.Errorf("Total offered/dropped/succeeded = %d/%d/%d, want %d/%d/%d", got.Offered, got.Dropped, got.Succeeded, want.Offered, want.Dropped, want.Succeeded)
	}
	if got := res.Seconds[0].Dropped; got != 90 {
		t.Errorf("Seconds[0].Dropped = %d, want 90", got)
	}
	if got := res.Phases[0].LastUnserved; got != 990*time.Millisecond {
		t.Errorf("Phases[0].LastUnserved = %v, want 990ms (the last request, dropped)", got)
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name     string
		give     error
		want     outcome
		wantCode codes.Code
	}{
		{name: "nil", give: nil, want: outcomeSucceeded, wantCode: codes.OK},
		{name: "resource exhausted", give: status.Error(codes.ResourceExhausted, "full"), want: outcomeRefused, wantCode: codes.ResourceExhausted},
		{name: "unavailable", give: status.Error(codes.Unavailable, "down"), want: outcomeRefused, wantCode: codes.Unavailable},
		{name: "wrapped refusal", give: fmt.Errorf("call: %w", status.Error(codes.ResourceExhausted, "full")), want: outcomeRefused, wantCode: codes.ResourceExhausted},
		{name: "pushback refusal", give: Pushback(status.Error(codes.ResourceExhausted, "full"), time.Second), want: outcomeRefused, wantCode: codes.ResourceExhausted},
		{name: "status deadline", give: status.Error(codes.DeadlineExceeded, "late"), want: outcomeTimedOut, wantCode: codes.DeadlineExceeded},
		{name: "context deadline", give: context.DeadlineExceeded, want: outcomeTimedOut, wantCode: codes.DeadlineExceeded},
		{name: "context canceled", give: context.Canceled, want: outcomeFailed, wantCode: codes.Canceled},
		{name: "internal", give: status.Error(codes.Internal, "bug"), want: outcomeFailed, wantCode: codes.Internal},
		{name: "plain error", give: errors.New("boom"), want: outcomeFailed, wantCode: codes.Unknown},
		{name: "out of range code", give: status.Error(codes.Code(99), "odd"), want: outcomeFailed, wantCode: codes.Unknown},
	}
	r := newRecorder([]Phase{{Duration: time.Second}}, time.Second, []codes.Code{codes.ResourceExhausted, codes.Unavailable})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, gotCode := r.classify(tt.give)
			if got != tt.want || gotCode != tt.wantCode {
				t.Errorf("classify(%v) = %v, %v; want %v, %v", tt.give, got, gotCode, tt.want, tt.wantCode)
			}
		})
	}
}

// TestPhasesAndSeconds checks attribution: requests count in the phase and
// second in which they were scheduled, refusals by code.
func TestPhasesAndSeconds(t *testing.T) {
	var clk *fakeClock
	var start time.Time
	call := func(context.Context) error {
		if clk.Now().Sub(start) >= time.Second {
			return status.Error(codes.ResourceExhausted, "busy")
		}
		return nil
	}
	g, clk := newTestGen(t, call, []Phase{
		{Name: "calm", Duration: time.Second, Rate: 10},
		{Name: "busy", Duration: 1500 * time.Millisecond, Rate: 10},
	})
	start = clk.Now()
	var done atomic.Int64
	g.testHookDone = func() { done.Add(1) }
	wait := runAsync(context.Background(), g)
	for i := range int64(25) {
		// One request is due every 100ms; let it finish before moving on.
		waitFor(t, "the due call and the scheduler to wait", func() bool { return done.Load() == i+1 && clk.pending() == 1 })
		clk.Advance(100 * time.Millisecond)
	}
	res, err := wait()
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	if len(res.Phases) != 2 || len(res.Seconds) != 3 {
		t.Fatalf("len(Phases), len(Seconds) = %d, %d; want 2, 3", len(res.Phases), len(res.Seconds))
	}
	tests := []struct {
		name          string
		give          Stats
		wantOffered   int64
		wantSucceeded int64
		wantRefused   int64
	}{
		{name: "phase calm", give: res.Phases[0].Stats, wantOffered: 10, wantSucceeded: 10},
		{name: "phase busy", give: res.Phases[1].Stats, wantOffered: 15, wantRefused: 15},
		{name: "second 0", give: res.Seconds[0].Stats, wantOffered: 10, wantSucceeded: 10},
		{name: "second 1", give: res.Seconds[1].Stats, wantOffered: 10, wantRefused: 10},
		{name: "second 2", give: res.Seconds[2].Stats, wantOffered: 5, wantRefused: 5},
		{name: "total", give: res.Total, wantOffered: 25, wantSucceeded: 10, wantRefused: 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.give.Offered != tt.wantOffered || tt.give.Succeeded != tt.wantSucceeded || tt.give.Refused["ResourceExhausted"] != tt.wantRefused || tt.give.RefusedTotal() != tt.wantRefused {
				t.Errorf("offered/succeeded/refused = %d/%d/%v, want %d/%d/%d", tt.give.Offered, tt.give.Succeeded, tt.give.Refused, tt.wantOffered, tt.wantSucceeded, tt.wantRefused)
			}
			if tt.give.Success.Count != tt.wantSucceeded || tt.give.Refusal.Count != tt.wantRefused {
				t.Errorf("latency counts = %d/%d, want %d/%d", tt.give.Success.Count, tt.give.Refusal.Count, tt.wantSucceeded, tt.wantRefused)
			}
		})
	}
	if res.Phases[1].Offset != time.Second || res.Seconds[2].Offset != 2*time.Second || res.Seconds[2].Length != 500*time.Millisecond {
		t.Errorf("Phases[1].Offset, Seconds[2].Offset, Seconds[2].Length = %v, %v, %v; want 1s, 2s, 500ms", res.Phases[1].Offset, res.Seconds[2].Offset, res.Seconds[2].Length)
	}
	// Every call of calm succeeded; busy's last, refused, was due 1.4s
	// into it.
	if res.Phases[0].LastUnserved != 0 || res.Phases[1].LastUnserved != 1400*time.Millisecond {
		t.Errorf("Phases[0].LastUnserved, Phases[1].LastUnserved = %v, %v; want 0s, 1.4s", res.Phases[0].LastUnserved, res.Phases[1].LastUnserved)
	}
}

func TestConstantArrivals(t *testing.T) {
	tests := []struct {
		name string
		give []Phase
		want []int64 // offered per phase
	}{
		{name: "whole rate", give: []Phase{{Name: "a", Duration: 1500 * time.Millisecond, Rate: 100}}, want: []int64{150}},
		{name: "idle phase", give: []Phase{{Name: "a", Duration: time.Second, Rate: 0}, {Name: "b", Duration: time.Second, Rate: 5}}, want: []int64{0, 5}},
		{name: "slow rate", give: []Phase{{Name: "a", Duration: 3 * time.Second, Rate: 0.5}}, want: []int64{2}},
		{name: "fractional", give: []Phase{{Name: "a", Duration: 500 * time.Millisecond, Rate: 3}}, want: []int64{2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, clk := newTestGen(t, ok, tt.give)
			wait := runAsync(context.Background(), g)
			var total time.Duration
			for _, p := range tt.give {
				total += p.Duration
			}
			for elapsed := time.Duration(0); elapsed < total; elapsed += 100 * time.Millisecond {
				waitFor(t, "scheduler to wait", func() bool { return clk.pending() == 1 })
				clk.Advance(100 * time.Millisecond)
			}
			res, err := wait()
			if err != nil {
				t.Fatalf("Run() error = %v", err)
			}
			for i, want := range tt.want {
				if got := res.Phases[i].Offered; got != want {
					t.Errorf("Phases[%d].Offered = %d, want %d", i, got, want)
				}
			}
		})
	}
}

func TestPoissonArrivals(t *testing.T) {
	const rate, seconds = 1000, 10
	g, clk := newTestGen(t, ok, []Phase{{Name: "p", Duration: seconds * time.Second, Rate: rate}}, WithArrivals(Poisson), WithSeed(42))
	wait := runAsync(context.Background(), g)
	for range seconds * 10 {
		waitFor(t, "scheduler to wait", func() bool { return clk.pending() == 1 })
		clk.Advance(100 * time.Millisecond)
	}
	res, err := wait()
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	if got := res.Total.Offered; math.Abs(float64(got)-rate*seconds) > 0.03*rate*seconds {
		t.Errorf("Total.Offered = %d, want %d ± 3%%", got, rate*seconds)
	}
	// Poisson counts per second have variance ≈ mean; constant arrivals
	// would give exactly `rate` every second (variance 0).
	var mean, variance float64
	for _, s := range res.Seconds {
		mean += float64(s.Offered) / seconds
	}
	for _, s := range res.Seconds {
		variance += (float64(s.Offered) - mean) * (float64(s.Offered) - mean) / (seconds - 1)
	}
	if variance < 0.2*mean || variance > 5*mean {
		t.Errorf("variance of offered per second = %.1f with mean %.1f, want it near the mean (Poisson)", variance, mean)
	}
	if res.Arrivals != "poisson" {
		t.Errorf("Arrivals = %q, want \"poisson\"", res.Arrivals)
	}
}

// TestClumps: 100 requests a second, constant, in clumps of 50ms: the
// five requests of each window start together at its beginning.
func TestClumps(t *testing.T) {
	var (
		mu      sync.Mutex
		started []time.Duration
	)
	var clk *fakeClock
	var t0 time.Time
	call := func(context.Context) error {
		mu.Lock()
		started = append(started, clk.Now().Sub(t0))
		mu.Unlock()
		return nil
	}
	g, c := newTestGen(t, call, []Phase{{Name: "p", Duration: time.Second, Rate: 100}}, WithClumps(50*time.Millisecond))
	clk, t0 = c, c.Now()
	wait := runAsync(context.Background(), g)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(started)
	}
	for now := time.Duration(0); now < time.Second; now += 10 * time.Millisecond {
		want := min(100, int(now/(50*time.Millisecond)+1)*5)
		waitFor(t, fmt.Sprintf("%d requests started at %v", want, now), func() bool { return count() == want && clk.pending() == 1 })
		clk.Advance(10 * time.Millisecond)
	}
	res, err := wait()
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	if res.Total.Offered != 100 {
		t.Errorf("Total.Offered = %d, want 100", res.Total.Offered)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, at := range started {
		if want := time.Duration(i/5) * 50 * time.Millisecond; at != want {
			t.Errorf("request %d started at %v, want %v (its clump's start)", i, at, want)
		}
	}
}

// TestRetryHonoursPushback drives one request whose first attempt is
// refused with a pushback; the retry must wait exactly that long.
func TestRetryHonoursPushback(t *testing.T) {
	refused := status.Error(codes.ResourceExhausted, "busy")
	withRetryInfo, err := status.New(codes.ResourceExhausted, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(300 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		give        error // first attempt's error
		wantWait    time.Duration
		wantRetries int64
	}{
		{name: "pushback", give: Pushback(refused, 200*time.Millisecond), wantWait: 200 * time.Millisecond, wantRetries: 1},
		{name: "trailer", give: PushbackFromTrailer(refused, metadata.Pairs(PushbackTrailer, "150")), wantWait: 150 * time.Millisecond, wantRetries: 1},
		{name: "retry info", give: withRetryInfo.Err(), wantWait: 300 * time.Millisecond, wantRetries: 1},
		{name: "do not retry", give: PushbackFromTrailer(refused, metadata.Pairs(PushbackTrailer, "-1")), wantRetries: 0},
		{name: "malformed trailer", give: PushbackFromTrailer(refused, metadata.Pairs(PushbackTrailer, "soon")), wantRetries: 0},
		{name: "code not retried", give: Pushback(status.Error(codes.Internal, "bug"), time.Millisecond), wantRetries: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var attempts atomic.Int64
			call := func(context.Context) error {
				if attempts.Add(1) == 1 {
					return tt.give
				}
				return nil
			}
			g, clk := newTestGen(t, call, []Phase{{Name: "p", Duration: time.Second, Rate: 1}},
				WithRetry(RetryPolicy{MaxAttempts: 3}))
			var done atomic.Int64
			g.testHookDone = func() { done.Add(1) }
			wait := runAsync(context.Background(), g)
			if tt.wantRetries == 0 {
				waitFor(t, "first attempt and scheduler wait", func() bool { return attempts.Load() == 1 && clk.pending() == 1 })
				clk.Advance(time.Second)
				res, err := wait()
				if err != nil {
					t.Fatalf("Run() error = %v", err)
				}
				if got := attempts.Load(); got != 1 || res.Total.Retries != 0 || res.Total.Succeeded != 0 {
					t.Errorf("attempts, Retries, Succeeded = %d, %d, %d; want 1, 0, 0", got, res.Total.Retries, res.Total.Succeeded)
				}
				return
			}
			// Scheduler and retry both wait on the clock.
			waitFor(t, "retry to wait", func() bool { return attempts.Load() == 1 && clk.pending() == 2 })
			clk.Advance(tt.wantWait - time.Millisecond)
			if got := attempts.Load(); got != 1 {
				t.Fatalf("attempts = %d %v after the first, want 1 (pushback %v not over)", got, tt.wantWait-time.Millisecond, tt.wantWait)
			}
			clk.Advance(time.Millisecond)
			waitFor(t, "second attempt to be recorded", func() bool { return attempts.Load() == 2 && done.Load() == 1 })
			clk.Advance(time.Second)
			res, err := wait()
			if err != nil {
				t.Fatalf("Run() error = %v", err)
			}
			if res.Total.Succeeded != 1 || res.Total.Retries != tt.wantRetries {
				t.Errorf("Succeeded, Retries = %d, %d; want 1, %d", res.Total.Succeeded, res.Total.Retries, tt.wantRetries)
			}
			if got := res.Total.Success.Max; !near(got, tt.wantWait, 0.01) {
				t.Errorf("Success.Max = %v, want %v (the pushback)", got, tt.wantWait)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 5, Backoff: 100 * time.Millisecond, MaxBackoff: 250 * time.Millisecond}
	refused := status.Error(codes.ResourceExhausted, "busy")
	tests := []struct {
		name    string
		give    error
		attempt int
		wantMax time.Duration
		wantOK  bool
	}{
		{name: "no pushback, first retry", give: refused, attempt: 1, wantMax: 100 * time.Millisecond, wantOK: true},
		{name: "no pushback, second retry", give: refused, attempt: 2, wantMax: 200 * time.Millisecond, wantOK: true},
		{name: "no pushback, capped", give: refused, attempt: 4, wantMax: 250 * time.Millisecond, wantOK: true},
		{name: "huge attempt, capped", give: refused, attempt: 200, wantMax: 250 * time.Millisecond, wantOK: true},
		{name: "pushback capped", give: Pushback(refused, time.Hour), attempt: 1, wantMax: 250 * time.Millisecond, wantOK: true},
		{name: "negative pushback", give: Pushback(refused, -time.Millisecond), attempt: 1, wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 200 {
				got, gotOK := retryDelay(tt.give, tt.attempt, p)
				if gotOK != tt.wantOK || got < 0 || got > tt.wantMax {
					t.Fatalf("retryDelay(%v, %d) = %v, %v; want within [0, %v], %v", tt.give, tt.attempt, got, gotOK, tt.wantMax, tt.wantOK)
				}
			}
		})
	}
	if got, _ := retryDelay(Pushback(refused, time.Hour), 1, p); got != 250*time.Millisecond {
		t.Errorf("retryDelay(pushback 1h) = %v, want exactly 250ms (MaxBackoff)", got)
	}
}

func TestCancelStopsRun(t *testing.T) {
	var started atomic.Int64
	call := func(ctx context.Context) error {
		started.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	g, clk := newTestGen(t, call, []Phase{{Name: "p", Duration: 10 * time.Second, Rate: 10}}, WithDeadline(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	wait := runAsync(ctx, g)
	waitFor(t, "scheduler to wait", func() bool { return clk.pending() == 1 })
	clk.Advance(time.Second)
	waitFor(t, "11 calls to start", func() bool { return started.Load() == 11 })
	cancel()
	res, err := wait()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run() error = %v, want context.Canceled", err)
	}
	if res.Total.Offered != 11 || res.Total.Failed["Canceled"] != 11 {
		t.Errorf("Total offered = %d, failed = %v; want 11 offered, 11 Canceled", res.Total.Offered, res.Total.Failed)
	}
}

// TestCancelResultCoversWhatRan: a Run interrupted 1.5 s into the first
// of two phases returns a Result, marked Interrupted, over the 1.5 s that
// ran: its Duration, PhaseRan (1.5 s of the first phase, none of the
// second) and its seconds (two, the second cut at 0.5 s); the summary line
// says so too.
func TestCancelResultCoversWhatRan(t *testing.T) {
	var started atomic.Int64
	call := func(context.Context) error {
		started.Add(1)
		return nil
	}
	var out syncBuffer
	g, clk := newTestGen(t, call, []Phase{{Name: "p", Duration: 10 * time.Second, Rate: 10}, {Name: "q", Duration: time.Second, Rate: 10}}, WithProgress(&out))
	ctx, cancel := context.WithCancel(context.Background())
	wait := runAsync(ctx, g)
	// The scheduler and the progress ticker both wait on the clock.
	waitFor(t, "scheduler to wait", func() bool { return clk.pending() == 2 })
	clk.Advance(1500 * time.Millisecond)
	waitFor(t, "16 calls to start", func() bool { return started.Load() == 16 && clk.pending() == 2 })
	cancel()
	res, err := wait()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run() error = %v, want context.Canceled", err)
	}
	if !res.Interrupted || res.Duration != 1500*time.Millisecond || res.PhaseRan(0) != 1500*time.Millisecond || res.PhaseRan(1) != 0 {
		t.Errorf("Interrupted = %t, Duration = %v, PhaseRan = %v, %v; want true, 1.5s, 1.5s, 0s", res.Interrupted, res.Duration, res.PhaseRan(0), res.PhaseRan(1))
	}
	var lengths []time.Duration
	var offered int64
	for _, s := range res.Seconds {
		lengths = append(lengths, s.Length)
		offered += s.Offered
	}
	if !slices.Equal(lengths, []time.Duration{time.Second, 500 * time.Millisecond}) || offered != 16 {
		t.Errorf("Seconds of lengths %v, offered %d; want two, of 1s and 500ms, with the 16 offered", lengths, offered)
	}
	if !strings.Contains(out.String(), "loadgen: interrupted after 1.5s  offered 16") {
		t.Errorf("progress output has no summary of the 1.5s that ran:\n%s", out.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestProgressLine(t *testing.T) {
	var out syncBuffer
	call := func(context.Context) error { return status.Error(codes.ResourceExhausted, "busy") }
	g, clk := newTestGen(t, call, []Phase{
		{Name: "spike", Duration: time.Second, Rate: 50},
		{Name: "idle", Duration: 1500 * time.Millisecond},
	}, WithProgress(&out))
	var done atomic.Int64
	g.testHookDone = func() { done.Add(1) }
	wait := runAsync(context.Background(), g)
	// The scheduler and the progress ticker both wait on the clock.
	waitFor(t, "scheduler and ticker to wait", func() bool { return clk.pending() == 2 })
	clk.Advance(999 * time.Millisecond)
	waitFor(t, "50 calls", func() bool { return done.Load() == 50 && clk.pending() == 2 })
	clk.Advance(time.Millisecond) // tick at 1s
	waitFor(t, "first progress line", func() bool { return strings.Count(out.String(), "\n") == 1 && clk.pending() == 2 })
	clk.Advance(time.Second) // tick at 2s
	waitFor(t, "second progress line", func() bool { return strings.Count(out.String(), "\n") == 2 && clk.pending() == 2 })
	clk.Advance(500 * time.Millisecond) // end of schedule
	if _, err := wait(); err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("progress output has %d lines, want 3 (two ticks and the summary):\n%s", len(lines), out.String())
	}
	tests := []struct {
		name string
		give string
		want []string
	}{
		{name: "first tick", give: lines[0], want: []string{"loadgen:   1s spike", "offered    50/s", "ok     0", "refused    50", "dropped    0", "in flight     0"}},
		{name: "second tick", give: lines[1], want: []string{"loadgen:   2s idle", "offered     0/s", "refused     0"}},
		{name: "summary", give: lines[2], want: []string{"loadgen: done 2.5s  offered 50  ok 0  refused 50  timed out 0  failed 0  dropped 0"}},
	}
	for _, tt := range tests {
		for _, want := range tt.want {
			if !strings.Contains(tt.give, want) {
				t.Errorf("%s line %q does not contain %q", tt.name, tt.give, want)
			}
		}
	}
}

// TestSecondHistogramsAreRecycled checks that a long run keeps histograms
// only for seconds that are still open.
func TestSecondHistogramsAreRecycled(t *testing.T) {
	const n = 30
	r := newRecorder([]Phase{{Name: "p", Duration: n * time.Second}}, n*time.Second, []codes.Code{codes.ResourceExhausted})
	for i := range n {
		at := time.Duration(i) * time.Second
		r.closeBefore(at)
		r.offer(at, 0)
		r.complete(at, 0, nil, time.Millisecond, 0)
	}
	r.closeAll()
	if got := len(r.pool); got != 2 {
		t.Errorf("len(pool) = %d after %d seconds, want 2 (one pair reused)", got, n)
	}
	for i, s := range r.seconds {
		if !s.done || s.final.Succeeded != 1 || s.final.Success.Count != 1 {
			t.Errorf("seconds[%d] done=%v succeeded=%d latency count=%d; want true, 1, 1", i, s.done, s.final.Succeeded, s.final.Success.Count)
		}
	}
}

func TestResultJSONRoundTrip(t *testing.T) {
	call := func(context.Context) error { return status.Error(codes.Unavailable, "down") }
	g, clk := newTestGen(t, call, []Phase{{Name: "p", Duration: time.Second, Rate: 20}})
	wait := runAsync(context.Background(), g)
	waitFor(t, "scheduler to wait", func() bool { return clk.pending() == 1 })
	clk.Advance(time.Second)
	res, err := wait()
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatalf("json.Marshal() error = %v", err)
	}
	for _, key := range []string{`"offered":20`, `"refused":{"Unavailable":20}`, `"p99_ns":`, `"seconds":[`, `"name":"p"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("JSON does not contain %s:\n%s", key, b)
		}
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("json.Unmarshal() error = %v", err)
	}
	if !reflect.DeepEqual(&back, res) {
		t.Errorf("JSON round trip changed the result:\n got %+v\nwant %+v", back, *res)
	}
}

func TestRequestIDIsStableAcrossRetries(t *testing.T) {
	var mu sync.Mutex
	seen := map[uint64]int{} // request id -> attempts
	call := func(ctx context.Context) error {
		id, ok := RequestID(ctx)
		if !ok {
			return errors.New("no request id")
		}
		mu.Lock()
		defer mu.Unlock()
		seen[id]++
		if seen[id] == 1 {
			return Pushback(status.Error(codes.Unavailable, "again"), 0)
		}
		return nil
	}
	g, clk := newTestGen(t, call, []Phase{{Name: "p", Duration: time.Second, Rate: 5}}, WithRetry(RetryPolicy{MaxAttempts: 2}))
	wait := runAsync(context.Background(), g)
	waitFor(t, "scheduler to wait", func() bool { return clk.pending() == 1 })
	clk.Advance(time.Second)
	res, err := wait()
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	want := map[uint64]int{1: 2, 2: 2, 3: 2, 4: 2, 5: 2}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("attempts by request id = %v, want %v", seen, want)
	}
	if res.Total.Succeeded != 5 || res.Total.Retries != 5 {
		t.Errorf("Succeeded, Retries = %d, %d; want 5, 5", res.Total.Succeeded, res.Total.Retries)
	}
	if _, ok := RequestID(context.Background()); ok {
		t.Errorf("RequestID(context.Background()) ok = true, want false")
	}
}

func TestParseCode(t *testing.T) {
	tests := []struct {
		give    string
		want    codes.Code
		wantErr bool
	}{
		{give: "ResourceExhausted", want: codes.ResourceExhausted},
		{give: "RESOURCE_EXHAUSTED", want: codes.ResourceExhausted},
		{give: "DeadlineExceeded", want: codes.DeadlineExceeded},
		{give: "resource", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseCode(tt.give)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseCode(%q) = %v, %v; want %v, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestTinyRateEndsOnSchedule: a rate so low that the gap between two
// requests does not fit in a time.Duration (about 292 years) offers at
// most the phase's first request, and the run goes on with its schedule;
// the gap must not wrap around to a negative offset, which left the
// scheduler waiting about 292 years for the next request.
func TestTinyRateEndsOnSchedule(t *testing.T) {
	for _, arr := range []Arrivals{Constant, Poisson} {
		t.Run(arr.String(), func(t *testing.T) {
			phases := []Phase{
				{Name: "tiny", Duration: 100 * time.Millisecond, Rate: 1e-14},
				{Name: "after", Duration: 100 * time.Millisecond, Rate: 20},
			}
			g, err := New(ok, phases, WithArrivals(arr))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res, err := g.Run(ctx)
			if err != nil {
				t.Fatalf("Run() error = %v (offered %d), want the 200ms schedule to end by itself", err, res.Total.Offered)
			}
			if got := res.Phases[0].Offered; got > 1 {
				t.Errorf("Phases[0].Offered = %d, want at most 1", got)
			}
			if arr == Constant && res.Phases[1].Offered != 2 {
				t.Errorf("Phases[1].Offered = %d, want 2", res.Phases[1].Offered)
			}
		})
	}
}
