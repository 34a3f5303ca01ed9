package breaker

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/levee-go/levee/internal/window"
)

// Option configures a Breaker. Each option documents its default; the
// defaults are Resilience4j's except where noted. An option only records
// its value; New validates them all and reports every bad one.
// A nil Option is ignored.
type Option func(*options)

type options struct {
	countSize       int           // count-based window size; New zeroes it for a time window
	timeSize        time.Duration // time-based window size; New zeroes it for a count window
	timeBins        int
	timeBased       bool    // the last window option was WithTimeWindow
	timeSet         bool    // WithTimeWindow was given
	failRate        float64 // percent
	slowThreshold   time.Duration
	slowRate        float64 // percent; 0 = slow calls not tracked
	slowSet         bool    // WithSlowCalls was given
	minCalls        int
	wait            time.Duration
	waitGrowth      float64
	waitMax         time.Duration
	growthSet       bool // WithWaitGrowth was given
	halfOpenCalls   int
	halfOpenMaxWait time.Duration
	openProbes      int // while open, one call in openProbes is a probe; 0: none
	classify        func(error) Outcome
	classifySet     bool // WithClassifier was given
	countLocal      bool
	onChange        func(from, to State)
	now             func() time.Time // unexported clock; tests replace it
}

func defaults() options {
	return options{
		countSize:     100,
		failRate:      50,
		minCalls:      100,
		wait:          60 * time.Second,
		waitGrowth:    1,
		halfOpenCalls: 10,
		now:           time.Now,
	}
}

// validate reports every bad value, each naming its option. Options that
// were given and then overridden (a count window followed by a time
// window) are checked as well: a bad value is never silently dropped.
func (o *options) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("breaker: "+format, args...))
	}
	if o.countSize < 1 || o.countSize > maxCountWindow {
		bad("WithCountWindow: size must be in [1, %d], got %d", maxCountWindow, o.countSize)
	}
	if o.timeSet && (o.timeBins < 1 || o.timeBins > window.MaxBins || o.timeSize <= 0 || o.timeSize/time.Duration(o.timeBins) < time.Millisecond) {
		bad("WithTimeWindow: want size > 0, bins in [1, %d] and size/bins >= 1ms, got %v and %d bins", window.MaxBins, o.timeSize, o.timeBins)
	}
	if !(o.failRate > 0 && o.failRate <= 100) {
		bad("WithFailureRate: percent must be in (0, 100], got %v", o.failRate)
	}
	if o.slowSet {
		if o.slowThreshold <= 0 {
			bad("WithSlowCalls: threshold must be > 0, got %v", o.slowThreshold)
		}
		if !(o.slowRate > 0 && o.slowRate <= 100) {
			bad("WithSlowCalls: percent must be in (0, 100], got %v", o.slowRate)
		}
	}
	if o.minCalls < 1 {
		bad("WithMinimumCalls: n must be >= 1, got %d", o.minCalls)
	}
	if o.wait <= 0 {
		bad("WithWaitInOpen: wait must be > 0, got %v", o.wait)
	}
	if o.growthSet {
		if !(o.waitGrowth >= 1) || math.IsInf(o.waitGrowth, 0) {
			bad("WithWaitGrowth: factor must be >= 1 and finite, got %v", o.waitGrowth)
		}
		if o.waitMax <= 0 {
			bad("WithWaitGrowth: max must be > 0, got %v", o.waitMax)
		}
	}
	if o.halfOpenCalls < 1 || o.halfOpenCalls > maxCountWindow {
		bad("WithHalfOpenCalls: n must be in [1, %d], got %d", maxCountWindow, o.halfOpenCalls)
	}
	if o.openProbes != 0 && (o.openProbes < 2 || o.openProbes > maxCountWindow) {
		bad("WithOpenProbes: every must be 0 (no probes while open) or in [2, %d], got %d", maxCountWindow, o.openProbes)
	}
	if o.halfOpenMaxWait < 0 {
		bad("WithMaxWaitInHalfOpen: wait must be >= 0, got %v", o.halfOpenMaxWait)
	}
	if o.classifySet && o.classify == nil {
		bad("WithClassifier: classifier must not be nil")
	}
	return errors.Join(errs...)
}

// WithCountWindow judges the last size recorded calls (a count-based sliding
// window). This is the default, with size 100. size must be in
// [1, 1_000_000]. The minimum number of calls is capped at size. Of
// WithCountWindow and WithTimeWindow the last one given applies.
func WithCountWindow(size int) Option {
	return func(o *options) { o.countSize, o.timeBased = size, false }
}

// WithTimeWindow judges the calls that finished during the last size,
// kept in bins buckets of size/bins each (a time-based sliding window; a
// call counts in the bucket of the time it finished). Resilience4j uses one
// bucket per second. Default: a count window of 100 calls. It needs
// size > 0, bins in [1, 10_000] and size/bins >= 1ms (10,000 buckets of
// 1s cover 2h46m; a longer window takes wider buckets).
//
// Recording into a time window takes a short lock; the count window is
// lock-free.
func WithTimeWindow(size time.Duration, bins int) Option {
	return func(o *options) { o.timeSize, o.timeBins, o.timeBased, o.timeSet = size, bins, true, true }
}

// WithFailureRate sets the failure rate, in percent of the recorded calls,
// at or above which the breaker opens (and at or above which half-open
// probes reopen it). Default 50. percent must be in (0, 100].
func WithFailureRate(percent float64) Option {
	return func(o *options) { o.failRate = percent }
}

// WithSlowCalls counts a call that took longer than threshold as slow, and
// opens the breaker when slow calls reach percent of the recorded calls,
// whether they succeeded or failed. Default: slow calls are not tracked
// (Resilience4j tracks them with 60s and 100%; here they are off unless
// asked for, so the admit path needs no clock). It needs threshold > 0
// and 0 < percent <= 100.
func WithSlowCalls(threshold time.Duration, percent float64) Option {
	return func(o *options) { o.slowThreshold, o.slowRate, o.slowSet = threshold, percent, true }
}

// WithMinimumCalls sets how many calls the window must hold before any rate
// is judged; below it the breaker never opens. Default 100. With a count
// window the effective minimum is min(n, window size), as in Resilience4j.
// n must be >= 1.
func WithMinimumCalls(n int) Option {
	return func(o *options) { o.minCalls = n }
}

// WithWaitInOpen sets how long the breaker stays open before the next call
// moves it to half-open. Default 60s. d must be > 0.
func WithWaitInOpen(d time.Duration) Option {
	return func(o *options) { o.wait = d }
}

// WithWaitGrowth makes the wait in open grow with repeated trips: the k-th
// consecutive opening (counted since the breaker was last closed) waits
// wait × factor^(k-1), capped at max. Default: no growth (factor 1). It
// needs a finite factor >= 1 and max > 0.
func WithWaitGrowth(factor float64, max time.Duration) Option {
	return func(o *options) { o.waitGrowth, o.waitMax, o.growthSet = factor, max, true }
}

// WithHalfOpenCalls sets how many probe calls half-open admits; their
// outcomes are judged together once all have finished. Default 10. n must
// be in [1, 1_000_000].
func WithHalfOpenCalls(n int) Option {
	return func(o *options) { o.halfOpenCalls = n }
}

// WithOpenProbes lets a trickle of probe calls through while the breaker
// is open, so that it notices a backend's recovery within a few calls
// rather than at the end of the wait in open: of the calls that arrive
// while open (not forced open), one in every is admitted as a probe, the
// others are refused with ErrOpen as usual. Probes do not wait for each
// other: a backend that hangs holds at most the probes sent within one
// call timeout.
//
// A probe that succeeds — not a failure, not slow (WithSlowCalls) — ends
// the wait in open at the probe's end: the breaker moves to half-open,
// whose probes then decide as usual whether it closes (the surer test
// the trickle only triggers). A probe that fails, or that the classifier
// ignores, changes nothing: the breaker stays open and its wait is not
// extended. A probe's outcome counts in Snapshot's Successes, Failures
// and SlowCalls; it is dropped as late if the breaker has left that stay
// in open meanwhile. The wait in open still ends as usual if no probe has
// succeeded by then.
//
// The trickle is a share of the calls, not a rate, so the load it puts on
// a sick backend is a fixed fraction (1/every) of what the callers offer,
// and the time it takes to notice a recovery is about every/2 calls'
// spacing. Default 0: no probes while open (Resilience4j's behaviour);
// levee's gRPC client (grpcguard.NewClient) sets it. every must be 0 or in
// [2, 1_000_000].
func WithOpenProbes(every int) Option {
	return func(o *options) { o.openProbes = every }
}

// WithMaxWaitInHalfOpen bounds how long the breaker stays half-open waiting
// for its probes to finish; after d the next call (or StateAt) reopens it.
// Default 0: wait until every probe has finished, as in Resilience4j — a
// probe whose Done is never called then keeps the breaker half-open, so
// set this when calls can be abandoned. d must be >= 0.
func WithMaxWaitInHalfOpen(d time.Duration) Option {
	return func(o *options) { o.halfOpenMaxWait = d }
}

// WithClassifier sets the function that decides whether a finished call's
// error is a Success, a Failure or ignored. It is called for every
// finished call, nil errors included, outside any lock, and must be safe
// for concurrent use. Default: DefaultClassifier. f must not be nil. Local
// refusals are sorted out before the classifier runs (see
// WithLocalRefusalsCounted).
func WithClassifier(f func(err error) Outcome) Option {
	return func(o *options) { o.classify, o.classifySet = f, true }
}

// WithLocalRefusalsCounted decides what happens when an admitted call is
// finished with an error that another guard in this process produced
// without calling the backend — an error whose chain holds an error with a
// method LocalRefusal() bool returning true, such as ErrOpen of another
// breaker or throttle.ErrThrottled.
//
// Default false: such calls are ignored (not recorded; in half-open the
// probe permit is given back), as go-zero does. The backend never saw the
// call, and counting it would keep the breaker open while the local guard
// refuses — the "never recovers" loop reported against kratos.
//
// With true they are recorded as failures (kratos' choice): use it only
// when the other guard's refusals really mean the backend is unhealthy.
// The classifier is not consulted for local refusals either way.
func WithLocalRefusalsCounted(count bool) Option {
	return func(o *options) { o.countLocal = count }
}

// WithOnStateChange registers f to be called after every state change, in
// the order the changes happened. f never runs under the breaker's lock: it
// may call the breaker's methods (a change it causes is delivered after f
// returns). It runs on the goroutine that caused the change — or on one
// already delivering earlier changes — so it should be quick. Default: none.
func WithOnStateChange(f func(from, to State)) Option {
	return func(o *options) { o.onChange = f }
}

const maxCountWindow = 1_000_000
