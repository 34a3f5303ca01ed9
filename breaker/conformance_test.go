package breaker

// Conformance tests written from Resilience4j's documented CircuitBreaker
// behaviour (resilience4j.readme.io/docs/circuitbreaker). Time is injected
// through AllowAt and Done's duration; nothing sleeps.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	t0      = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	errBoom = errors.New("backend failed")
)

func at(d time.Duration) time.Time { return t0.Add(d) }

// call admits one call at time now and finishes it with err after d. It
// fails the test if the call is refused.
func call(t *testing.T, b *Breaker, now time.Duration, err error, d time.Duration) {
	t.Helper()
	p, aerr := b.AllowAt(at(now))
	if aerr != nil {
		t.Fatalf("Breaker.AllowAt(t0+%v) error = %v, want admitted (state %v)", now, aerr, b.Snapshot().State)
	}
	p.Done(err, d)
}

func wantState(t *testing.T, b *Breaker, now time.Duration, want State) {
	t.Helper()
	if got := b.StateAt(at(now)); got != want {
		t.Fatalf("Breaker.StateAt(t0+%v) = %v, want %v", now, got, want)
	}
}

func wantRefused(t *testing.T, b *Breaker, now time.Duration, want error) {
	t.Helper()
	if _, err := b.AllowAt(at(now)); err != want {
		t.Fatalf("Breaker.AllowAt(t0+%v) error = %v, want %v", now, err, want)
	}
}

// tripped returns a breaker that opened at t0: window and minimum of n
// calls, all failed.
func tripped(t *testing.T, n int, opts ...Option) *Breaker {
	t.Helper()
	opts = append([]Option{WithCountWindow(n), WithMinimumCalls(n), WithWaitInOpen(10 * time.Second)}, opts...)
	b := mustNew(t, opts...)
	for range n {
		call(t, b, 0, errBoom, 0)
	}
	wantState(t, b, 0, StateOpen)
	return b
}

// "If only 9 calls have been evaluated the CircuitBreaker will not trip
// open even if all 9 calls have failed."
func TestNoTripBelowMinimumCalls(t *testing.T) {
	tests := []struct {
		name   string
		give   []Option
		fails  int // failures that must leave it closed
		window string
	}{
		{name: "count window", give: []Option{WithCountWindow(100), WithMinimumCalls(10)}, fails: 9},
		{name: "count window smaller than minimum caps it", give: []Option{WithCountWindow(5), WithMinimumCalls(10)}, fails: 4},
		{name: "time window", give: []Option{WithTimeWindow(10*time.Second, 10), WithMinimumCalls(10)}, fails: 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustNew(t, tt.give...)
			for i := range tt.fails {
				call(t, b, time.Duration(i)*time.Millisecond, errBoom, 0)
			}
			wantState(t, b, time.Second, StateClosed)
			call(t, b, time.Second, errBoom, 0)
			wantState(t, b, time.Second, StateOpen)
		})
	}
}

// "The state of the CircuitBreaker changes from CLOSED to OPEN when the
// failure rate is equal or greater than a configurable threshold."
func TestTripAtExactlyThreshold(t *testing.T) {
	tests := []struct {
		name      string
		threshold float64
		successes int // recorded first
		failures  int // recorded next; 10 calls in all
		want      State
	}{
		{name: "50% at threshold 50", threshold: 50, successes: 5, failures: 5, want: StateOpen},
		{name: "40% under threshold 50", threshold: 50, successes: 6, failures: 4, want: StateClosed},
		{name: "30% at threshold 30", threshold: 30, successes: 7, failures: 3, want: StateOpen},
		{name: "100% at threshold 100", threshold: 100, successes: 0, failures: 10, want: StateOpen},
		{name: "90% under threshold 100", threshold: 100, successes: 1, failures: 9, want: StateClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustNew(t, WithCountWindow(10), WithMinimumCalls(10), WithFailureRate(tt.threshold))
			for range tt.successes {
				call(t, b, 0, nil, 0)
			}
			for range tt.failures {
				call(t, b, 0, errBoom, 0)
			}
			wantState(t, b, 0, tt.want)
		})
	}
}

// The count window holds the last N calls: old failures slide out.
func TestCountWindowSlides(t *testing.T) {
	b := mustNew(t, WithCountWindow(4), WithMinimumCalls(4), WithFailureRate(50))
	for _, err := range []error{errBoom, nil, nil, nil, nil} { // 1 of 4 failed, then it slides out
		call(t, b, 0, err, 0)
	}
	call(t, b, 0, errBoom, 0) // window: ok ok ok F = 25%
	wantState(t, b, 0, StateClosed)
	call(t, b, 0, errBoom, 0) // window: ok ok F F = 50%
	wantState(t, b, 0, StateOpen)
}

// A time window holds the calls of the last T; older bins expire.
func TestTimeWindowExpires(t *testing.T) {
	b := mustNew(t, WithTimeWindow(10*time.Second, 10), WithMinimumCalls(4), WithFailureRate(50))
	for range 3 {
		call(t, b, 0, errBoom, 0)
	}
	// At 10s the bin of t0 has left the window: one failure out of one.
	call(t, b, 10*time.Second, errBoom, 0)
	wantState(t, b, 10*time.Second, StateClosed)
	if s := b.Snapshot(); s.WindowCalls != 1 || s.WindowFailures != 1 {
		t.Fatalf("Snapshot window = %d calls, %d failures, want 1, 1", s.WindowCalls, s.WindowFailures)
	}
	// Calls count at the time they finish: admitted at 11s, finished at 19.5s.
	for range 2 {
		call(t, b, 11*time.Second, errBoom, 8500*time.Millisecond)
	}
	call(t, b, 19*time.Second, nil, 0)
	// 10s..19.5s: F F F ok = 75%.
	wantState(t, b, 19*time.Second, StateOpen)
}

// Slow calls open the breaker with no errors at all; a call is slow when
// it takes longer than the threshold, not when it equals it.
func TestSlowCallsTrip(t *testing.T) {
	tests := []struct {
		name string
		give time.Duration // duration of every call
		want State
	}{
		{name: "above threshold", give: 101 * time.Millisecond, want: StateOpen},
		{name: "at threshold is not slow", give: 100 * time.Millisecond, want: StateClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustNew(t, WithCountWindow(10), WithMinimumCalls(10), WithSlowCalls(100*time.Millisecond, 80))
			for range 10 {
				call(t, b, 0, nil, tt.give)
			}
			wantState(t, b, 0, tt.want)
			if s := b.Snapshot(); s.Failures != 0 {
				t.Fatalf("Snapshot().Failures = %d, want 0", s.Failures)
			}
		})
	}
}

func TestSlowRateAtThreshold(t *testing.T) {
	b := mustNew(t, WithCountWindow(10), WithMinimumCalls(10), WithSlowCalls(time.Second, 30))
	for i := range 10 {
		d := time.Millisecond
		if i >= 7 {
			d = 2 * time.Second // 3 slow calls of 10: exactly 30%
		}
		call(t, b, 0, nil, d)
		if i < 9 {
			wantState(t, b, 0, StateClosed)
		}
	}
	wantState(t, b, 0, StateOpen)
}

// "After a wait time duration has elapsed, the CircuitBreaker state changes
// from OPEN to HALF_OPEN."
func TestOpenToHalfOpenAfterWait(t *testing.T) {
	b := tripped(t, 4)
	wantRefused(t, b, 10*time.Second-time.Nanosecond, ErrOpen)
	wantState(t, b, 10*time.Second-time.Nanosecond, StateOpen)
	p, err := b.AllowAt(at(10 * time.Second))
	if err != nil {
		t.Fatalf("Breaker.AllowAt(t0+10s) error = %v, want a probe permit", err)
	}
	wantState(t, b, 10*time.Second, StateHalfOpen)
	p.Done(nil, 0)
}

// "permits a configurable number of calls ... Further calls are rejected
// ... until all permitted calls have completed. If the failure rate or slow
// call rate is then equal or greater than the configured threshold, the
// state changes back to OPEN. If the failure rate and slow call rate is
// below the threshold, the state changes back to CLOSED."
func TestHalfOpenJudgesPermittedCallsTogether(t *testing.T) {
	tests := []struct {
		name string
		give []error // outcomes of the 4 probes, in finishing order
		slow int     // how many of them (the last ones) are slow
		want State
	}{
		{name: "all succeed", give: []error{nil, nil, nil, nil}, want: StateClosed},
		{name: "25% failed is under 50%", give: []error{errBoom, nil, nil, nil}, want: StateClosed},
		{name: "50% failed reopens", give: []error{nil, errBoom, nil, errBoom}, want: StateOpen},
		{name: "a failure first does not decide alone", give: []error{errBoom, errBoom, nil, nil}, want: StateOpen},
		{name: "slow probes reopen", give: []error{nil, nil, nil, nil}, slow: 2, want: StateOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tripped(t, 4, WithHalfOpenCalls(4), WithSlowCalls(time.Second, 50))
			now := 10 * time.Second
			var probes []Permit
			for range 4 {
				p, err := b.AllowAt(at(now))
				if err != nil {
					t.Fatalf("Breaker.AllowAt(t0+10s) error = %v, want a probe permit", err)
				}
				probes = append(probes, p)
			}
			_, err := b.AllowAt(at(now))
			if err != ErrTooManyCalls || !errors.Is(err, ErrOpen) {
				t.Fatalf("fifth Breaker.AllowAt(t0+10s) error = %v, want ErrTooManyCalls matching ErrOpen", err)
			}
			for i, p := range probes {
				d := time.Millisecond
				if i >= len(probes)-tt.slow {
					d = 2 * time.Second
				}
				p.Done(tt.give[i], d)
				if i < len(probes)-1 {
					wantState(t, b, now, StateHalfOpen)
				}
			}
			wantState(t, b, now+2*time.Second, tt.want)
			if tt.want == StateClosed {
				if s := b.Snapshot(); s.WindowCalls != 0 {
					t.Fatalf("after closing Snapshot().WindowCalls = %d, want 0 (a fresh window)", s.WindowCalls)
				}
			}
		})
	}
}

// Reopened from half-open, the breaker waits again and probes again.
func TestHalfOpenReopensAndWaitsAgain(t *testing.T) {
	b := tripped(t, 2, WithHalfOpenCalls(1))
	call(t, b, 10*time.Second, errBoom, time.Second) // probe fails at 11s
	wantState(t, b, 11*time.Second, StateOpen)
	wantRefused(t, b, 21*time.Second-time.Nanosecond, ErrOpen)
	call(t, b, 21*time.Second, nil, 0)
	wantState(t, b, 21*time.Second, StateClosed)
}

// Results of calls admitted in an earlier state are dropped.
func TestLateResultsIgnored(t *testing.T) {
	t.Run("closed call finishing in half-open", func(t *testing.T) {
		b := mustNew(t, WithCountWindow(2), WithMinimumCalls(2), WithWaitInOpen(10*time.Second), WithHalfOpenCalls(2))
		old, err := b.AllowAt(at(0))
		if err != nil {
			t.Fatal(err)
		}
		call(t, b, 0, errBoom, 0)
		call(t, b, 0, errBoom, 0)
		wantState(t, b, 0, StateOpen)
		p1, _ := b.AllowAt(at(10 * time.Second))
		p2, _ := b.AllowAt(at(10 * time.Second))
		old.Done(errBoom, 11*time.Second) // late: must not count as a probe
		p1.Done(nil, 0)
		wantState(t, b, 10*time.Second, StateHalfOpen)
		p2.Done(nil, 0)
		wantState(t, b, 10*time.Second, StateClosed)
		if got := b.Snapshot().Late; got != 1 {
			t.Fatalf("Snapshot().Late = %d, want 1", got)
		}
	})
	t.Run("probe finishing after the breaker closed", func(t *testing.T) {
		b := tripped(t, 2, WithHalfOpenCalls(2), WithMaxWaitInHalfOpen(5*time.Second))
		slow, _ := b.AllowAt(at(10 * time.Second))
		wantRefused(t, b, 15*time.Second, ErrOpen) // half-open ran out: open again
		call(t, b, 25*time.Second, nil, 0)
		call(t, b, 25*time.Second, nil, 0)
		wantState(t, b, 25*time.Second, StateClosed)
		// The first generation's probe fails now: the new closed window must
		// not see it.
		slow.Done(errBoom, 20*time.Second)
		if s := b.Snapshot(); s.WindowCalls != 0 || s.Late != 1 {
			t.Fatalf("Snapshot() window calls %d, late %d; want 0, 1", s.WindowCalls, s.Late)
		}
	})
	t.Run("closed call finishing after a reset", func(t *testing.T) {
		b := mustNew(t, WithCountWindow(1), WithMinimumCalls(1))
		p, _ := b.AllowAt(at(0))
		b.Reset()
		p.Done(errBoom, 0)
		wantState(t, b, 0, StateClosed)
	})
}

// waitIntervalFunctionInOpenState: the wait grows with repeated trips and
// is capped; closing resets it.
func TestGrowingWait(t *testing.T) {
	b := tripped(t, 1, WithHalfOpenCalls(1), WithWaitGrowth(2, 35*time.Second))
	now := time.Duration(0)
	for i, want := range []time.Duration{10 * time.Second, 20 * time.Second, 35 * time.Second, 35 * time.Second} {
		wantRefused(t, b, now+want-time.Nanosecond, ErrOpen)
		now += want
		call(t, b, now, errBoom, 0) // the probe fails: open again
		if got := b.StateAt(at(now)); got != StateOpen {
			t.Fatalf("trip %d: Breaker.StateAt(t0+%v) = %v, want open", i+1, now, got)
		}
	}
	now += 35 * time.Second
	call(t, b, now, nil, 0) // the probe succeeds: closed
	wantState(t, b, now, StateClosed)
	call(t, b, now, errBoom, 0) // trip again: back to the base wait
	wantRefused(t, b, now+10*time.Second-time.Nanosecond, ErrOpen)
	wantState(t, b, now+10*time.Second, StateHalfOpen)
}

// maxWaitDurationInHalfOpenState: the longest the breaker stays half-open
// before it switches to open.
func TestMaxWaitInHalfOpen(t *testing.T) {
	b := tripped(t, 2, WithHalfOpenCalls(2), WithMaxWaitInHalfOpen(5*time.Second))
	p, err := b.AllowAt(at(10 * time.Second)) // one probe, then nothing
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, b, 15*time.Second-time.Nanosecond, StateHalfOpen)
	wantState(t, b, 15*time.Second, StateOpen)
	p.Done(nil, 0) // late
	wantRefused(t, b, 25*time.Second-time.Nanosecond, ErrOpen)
	wantState(t, b, 25*time.Second, StateHalfOpen)

	// Without a maximum the breaker waits for its probes however long.
	b = tripped(t, 2, WithHalfOpenCalls(1))
	p, _ = b.AllowAt(at(10 * time.Second))
	wantState(t, b, 1000*time.Hour, StateHalfOpen)
	p.Done(nil, 0)
	wantState(t, b, 1000*time.Hour, StateClosed)
}

func TestForcedOpenAndDisabled(t *testing.T) {
	b := mustNew(t, WithCountWindow(2), WithMinimumCalls(2))
	b.ForceOpen()
	wantRefused(t, b, 0, ErrOpen)
	wantRefused(t, b, 1000*time.Hour, ErrOpen)
	wantState(t, b, 1000*time.Hour, StateForcedOpen)

	b.Disable()
	for range 10 {
		call(t, b, 0, errBoom, 0)
	}
	wantState(t, b, 0, StateDisabled)
	if s := b.Snapshot(); s.Failures != 0 {
		t.Fatalf("disabled: Snapshot().Failures = %d, want 0", s.Failures)
	}

	b.Reset()
	call(t, b, 0, errBoom, 0)
	wantState(t, b, 0, StateClosed) // one failure; the disabled ones were not recorded
	call(t, b, 0, errBoom, 0)
	wantState(t, b, 0, StateOpen)
}

// Ignored outcomes are not recorded; in half-open they give the permit back.
func TestIgnoredOutcomes(t *testing.T) {
	errIgnored := errors.New("not the backend's fault")
	classify := func(err error) Outcome {
		switch {
		case err == nil:
			return Success
		case errors.Is(err, errIgnored):
			return Ignore
		}
		return Failure
	}
	b := tripped(t, 2, WithHalfOpenCalls(1), WithClassifier(classify))
	p, _ := b.AllowAt(at(10 * time.Second))
	wantRefused(t, b, 10*time.Second, ErrTooManyCalls)
	p.Done(fmt.Errorf("wrapped: %w", errIgnored), 0)
	wantState(t, b, 10*time.Second, StateHalfOpen)
	call(t, b, 10*time.Second, nil, 0) // the released permit probes again
	wantState(t, b, 10*time.Second, StateClosed)
	for range 5 {
		call(t, b, 10*time.Second, errIgnored, 0)
	}
	wantState(t, b, 10*time.Second, StateClosed)
	if s := b.Snapshot(); s.Ignored != 6 || s.WindowCalls != 0 {
		t.Fatalf("Snapshot() ignored %d, window calls %d; want 6, 0", s.Ignored, s.WindowCalls)
	}
}

// A Permit finished twice counts once, in every state, and a stale Permit
// never finishes the call that got its slot next.
func TestDoneTwiceCountsOnce(t *testing.T) {
	t.Run("closed failure", func(t *testing.T) {
		b := mustNew(t, WithCountWindow(4), WithMinimumCalls(4), WithFailureRate(50))
		p, err := b.AllowAt(at(0))
		if err != nil {
			t.Fatal(err)
		}
		p.Done(errBoom, 0)
		p.Done(errBoom, 0) // must not be a second failure: 1 of 4 is under 50%
		call(t, b, 0, nil, 0)
		call(t, b, 0, nil, 0)
		call(t, b, 0, nil, 0)
		wantState(t, b, 0, StateClosed)
		if s := b.Snapshot(); s.Failures != 1 || s.WindowCalls != 4 || s.Duplicates != 1 {
			t.Fatalf("Snapshot() failures %d, window calls %d, duplicates %d; want 1, 4, 1", s.Failures, s.WindowCalls, s.Duplicates)
		}
	})
	t.Run("half-open probe cannot close the breaker for another", func(t *testing.T) {
		b := tripped(t, 2, WithHalfOpenCalls(2))
		p1, _ := b.AllowAt(at(10 * time.Second))
		p2, err := b.AllowAt(at(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		p1.Done(nil, 0)
		p1.Done(nil, 0) // p2 is still running: the probes are not all in
		wantState(t, b, 10*time.Second, StateHalfOpen)
		p2.Done(errBoom, 0) // 1 failure of 2 probes: 50% reopens
		wantState(t, b, 10*time.Second, StateOpen)
	})
	t.Run("ignored probe gives its permit back once", func(t *testing.T) {
		b := tripped(t, 2, WithHalfOpenCalls(1), WithClassifier(func(err error) Outcome {
			if errors.Is(err, errIgnored) {
				return Ignore
			}
			return DefaultClassifier(err)
		}))
		p, _ := b.AllowAt(at(10 * time.Second))
		p.Done(errIgnored, 0)
		p.Done(errIgnored, 0)
		if _, err := b.AllowAt(at(10 * time.Second)); err != nil {
			t.Fatalf("Breaker.AllowAt(t0+10s) error = %v, want the permit given back", err)
		}
		wantRefused(t, b, 10*time.Second, ErrTooManyCalls) // one probe, not two
		if s := b.Snapshot(); s.Ignored != 1 || s.Duplicates != 1 {
			t.Fatalf("Snapshot() ignored %d, duplicates %d; want 1, 1", s.Ignored, s.Duplicates)
		}
	})
	t.Run("stale permit after its slot is reused", func(t *testing.T) {
		b := mustNew(t, WithCountWindow(10_000), WithMinimumCalls(10_000))
		for i := range 1000 { // enough rounds that q takes p's slot often
			p, _ := b.AllowAt(at(0))
			if !p.Done(nil, 0) {
				t.Fatalf("round %d: first Permit.Done = false, want true", i)
			}
			q, _ := b.AllowAt(at(0))
			if p.Done(errBoom, 0) {
				t.Fatalf("round %d: second Permit.Done = true, want false", i)
			}
			if !q.Done(nil, 0) {
				t.Fatalf("round %d: the next call's Permit.Done = false after a stale Done, want true", i)
			}
		}
		if s := b.Snapshot(); s.Successes != 2000 || s.Failures != 0 || s.Duplicates != 1000 {
			t.Fatalf("Snapshot() successes %d, failures %d, duplicates %d; want 2000, 0, 1000", s.Successes, s.Failures, s.Duplicates)
		}
	})
	t.Run("zero permit", func(t *testing.T) {
		if (Permit{}).Done(errBoom, 0) {
			t.Fatal("Permit{}.Done = true, want false")
		}
	})
}

// Many calls in flight at once each hold their own slot: the table grows
// and every permit finishes exactly once.
func TestManyPermitsInFlight(t *testing.T) {
	b := mustNew(t, WithCountWindow(10_000), WithMinimumCalls(10_000))
	ps := make([]Permit, 5000)
	for i := range ps {
		p, err := b.AllowAt(at(0))
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	seen := make(map[*slot]bool, len(ps))
	for _, p := range ps {
		if seen[p.s] {
			t.Fatal("two permits in flight share a slot")
		}
		seen[p.s] = true
	}
	for i, p := range ps {
		if !p.Done(nil, 0) || p.Done(errBoom, 0) {
			t.Fatalf("permit %d: Done twice did not return true then false", i)
		}
	}
	if s := b.Snapshot(); s.Successes != 5000 || s.Failures != 0 {
		t.Fatalf("Snapshot() successes %d, failures %d; want 5000, 0", s.Successes, s.Failures)
	}
}

// Goroutines racing to finish one Permit: exactly one records it.
func TestConcurrentDoneOnePermit(t *testing.T) {
	b := mustNew(t, WithCountWindow(10_000), WithMinimumCalls(10_000))
	for range 200 {
		p, _ := b.AllowAt(at(0))
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if p.Done(errBoom, 0) {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("%d goroutines' Permit.Done returned true, want exactly 1", n)
		}
	}
	if s := b.Snapshot(); s.Failures != 200 || s.Duplicates != 600 {
		t.Fatalf("Snapshot() failures %d, duplicates %d; want 200, 600", s.Failures, s.Duplicates)
	}
}

// maxWaitDurationInHalfOpenState is a deadline: the breaker is open from
// it whether or not anything asked, and a probe that ends at or after it is
// late — it can neither close nor reopen the breaker.
func TestProbeAfterMaxWaitInHalfOpen(t *testing.T) {
	tests := []struct {
		name     string
		give     time.Duration // the probe's duration; admitted at 10s, deadline 15s
		giveErr  error
		want     State // at the probe's end
		wantLate uint64
	}{
		{name: "success ending after the deadline", give: 6 * time.Second, want: StateOpen, wantLate: 1},
		{name: "success ending at the deadline", give: 5 * time.Second, want: StateOpen, wantLate: 1},
		{name: "failure ending after the deadline", give: 6 * time.Second, giveErr: errBoom, want: StateOpen, wantLate: 1},
		{name: "success just in time", give: 5*time.Second - time.Nanosecond, want: StateClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tripped(t, 2, WithHalfOpenCalls(1), WithMaxWaitInHalfOpen(5*time.Second))
			p, err := b.AllowAt(at(10 * time.Second))
			if err != nil {
				t.Fatal(err)
			}
			// Nothing asks the breaker until the probe ends.
			if !p.Done(tt.giveErr, tt.give) {
				t.Fatal("Permit.Done = false, want true")
			}
			end := 10*time.Second + tt.give
			s := b.Snapshot()
			if s.State != tt.want || s.Late != tt.wantLate {
				t.Fatalf("after the probe ended at t0+%v: Snapshot() state %v, late %d; want %v, %d", end, s.State, s.Late, tt.want, tt.wantLate)
			}
			if tt.want == StateOpen {
				// Open since the deadline (15s), so half-open again 10s later.
				if s.Failures != 2 || s.Successes != 0 {
					t.Fatalf("Snapshot() failures %d, successes %d; want only the 2 that tripped it", s.Failures, s.Successes)
				}
				wantRefused(t, b, 25*time.Second-time.Nanosecond, ErrOpen)
				wantState(t, b, 25*time.Second, StateHalfOpen)
			}
		})
	}
}

// The wait in open after a half-open deadline counts from the deadline,
// not from whenever the breaker is next asked.
func TestOpenAtHalfOpenDeadlineUnasked(t *testing.T) {
	b := tripped(t, 2, WithHalfOpenCalls(2), WithMaxWaitInHalfOpen(5*time.Second))
	p, err := b.AllowAt(at(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Asked first at 22s: open since 15s, so half-open at 25s, not 32s.
	wantState(t, b, 22*time.Second, StateOpen)
	wantRefused(t, b, 25*time.Second-time.Nanosecond, ErrOpen)
	call(t, b, 25*time.Second, nil, 0)
	p.Done(nil, 0) // the first generation's probe: late
	call(t, b, 25*time.Second, nil, 0)
	wantState(t, b, 25*time.Second, StateClosed)
	if s := b.Snapshot(); s.Late != 1 {
		t.Fatalf("Snapshot().Late = %d, want 1", s.Late)
	}
}
