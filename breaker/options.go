package breaker

import (
	"fmt"
	"math"
	"time"
)

// Option configures a Breaker. Each option documents its default; the
// defaults are Resilience4j's except where noted.
type Option func(*options)

type options struct {
	countSize       int           // count-based window size; 0 when time-based
	timeSize        time.Duration // time-based window size; 0 when count-based
	timeBins        int
	failRate        float64 // percent
	slowThreshold   time.Duration
	slowRate        float64 // percent; 0 = slow calls not tracked
	minCalls        int
	wait            time.Duration
	waitGrowth      float64
	waitMax         time.Duration
	halfOpenCalls   int
	halfOpenMaxWait time.Duration
	classify        func(error) Outcome
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

// WithCountWindow judges the last size recorded calls (a count-based sliding
// window). This is the default, with size 100. It panics unless
// 1 <= size <= 1_000_000. The minimum number of calls is capped at size.
func WithCountWindow(size int) Option {
	if size < 1 || size > maxCountWindow {
		panic(fmt.Sprintf("breaker: count window size must be in [1, %d], got %d", maxCountWindow, size))
	}
	return func(o *options) { o.countSize, o.timeSize, o.timeBins = size, 0, 0 }
}

// WithTimeWindow judges the calls that finished during the last size,
// kept in bins buckets of size/bins each (a time-based sliding window; a
// call counts in the bucket of the time it finished). Resilience4j uses one
// bucket per second. Default: a count window of 100 calls. It panics unless
// size > 0, bins >= 1 and size/bins >= 1ms.
//
// Recording into a time window takes a short lock; the count window is
// lock-free.
func WithTimeWindow(size time.Duration, bins int) Option {
	if bins < 1 || size <= 0 || size/time.Duration(bins) < time.Millisecond {
		panic(fmt.Sprintf("breaker: time window needs size > 0, bins >= 1 and size/bins >= 1ms, got %v and %d bins", size, bins))
	}
	return func(o *options) { o.countSize, o.timeSize, o.timeBins = 0, size, bins }
}

// WithFailureRate sets the failure rate, in percent of the recorded calls,
// at or above which the breaker opens (and at or above which half-open
// probes reopen it). Default 50. It panics unless 0 < percent <= 100.
func WithFailureRate(percent float64) Option {
	checkPercent("failure rate", percent)
	return func(o *options) { o.failRate = percent }
}

// WithSlowCalls counts a call that took longer than threshold as slow, and
// opens the breaker when slow calls reach percent of the recorded calls,
// whether they succeeded or failed. Default: slow calls are not tracked
// (Resilience4j tracks them with 60s and 100%; here they are off unless
// asked for, so the admit path needs no clock). It panics unless
// threshold > 0 and 0 < percent <= 100.
func WithSlowCalls(threshold time.Duration, percent float64) Option {
	if threshold <= 0 {
		panic(fmt.Sprintf("breaker: slow call threshold must be > 0, got %v", threshold))
	}
	checkPercent("slow call rate", percent)
	return func(o *options) { o.slowThreshold, o.slowRate = threshold, percent }
}

// WithMinimumCalls sets how many calls the window must hold before any rate
// is judged; below it the breaker never opens. Default 100. With a count
// window the effective minimum is min(n, window size), as in Resilience4j.
// It panics if n < 1.
func WithMinimumCalls(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("breaker: minimum calls must be >= 1, got %d", n))
	}
	return func(o *options) { o.minCalls = n }
}

// WithWaitInOpen sets how long the breaker stays open before the next call
// moves it to half-open. Default 60s. It panics if d <= 0.
func WithWaitInOpen(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("breaker: wait in open must be > 0, got %v", d))
	}
	return func(o *options) { o.wait = d }
}

// WithWaitGrowth makes the wait in open grow with repeated trips: the k-th
// consecutive opening (counted since the breaker was last closed) waits
// wait × factor^(k-1), capped at max. Default: no growth (factor 1). It
// panics unless factor >= 1 and max > 0.
func WithWaitGrowth(factor float64, max time.Duration) Option {
	if !(factor >= 1) || math.IsInf(factor, 0) {
		panic(fmt.Sprintf("breaker: wait growth factor must be >= 1 and finite, got %v", factor))
	}
	if max <= 0 {
		panic(fmt.Sprintf("breaker: maximum wait in open must be > 0, got %v", max))
	}
	return func(o *options) { o.waitGrowth, o.waitMax = factor, max }
}

// WithHalfOpenCalls sets how many probe calls half-open admits; their
// outcomes are judged together once all have finished. Default 10. It
// panics unless 1 <= n <= 1_000_000.
func WithHalfOpenCalls(n int) Option {
	if n < 1 || n > maxCountWindow {
		panic(fmt.Sprintf("breaker: half-open calls must be in [1, %d], got %d", maxCountWindow, n))
	}
	return func(o *options) { o.halfOpenCalls = n }
}

// WithMaxWaitInHalfOpen bounds how long the breaker stays half-open waiting
// for its probes to finish; after d the next call (or StateAt) reopens it.
// Default 0: wait until every probe has finished, as in Resilience4j — a
// probe whose Done is never called then keeps the breaker half-open, so
// set this when calls can be abandoned. It panics if d < 0.
func WithMaxWaitInHalfOpen(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("breaker: max wait in half-open must be >= 0, got %v", d))
	}
	return func(o *options) { o.halfOpenMaxWait = d }
}

// WithClassifier sets the function that decides whether a finished call's
// error is a Success, a Failure or ignored. It is called for every
// finished call, nil errors included, outside any lock, and must be safe
// for concurrent use. Default: DefaultClassifier. Local refusals are
// sorted out before the classifier runs (see WithLocalRefusalsCounted).
func WithClassifier(f func(err error) Outcome) Option {
	if f == nil {
		panic("breaker: classifier must not be nil")
	}
	return func(o *options) { o.classify = f }
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

func checkPercent(what string, p float64) {
	if !(p > 0 && p <= 100) {
		panic(fmt.Sprintf("breaker: %s must be in (0, 100] percent, got %v", what, p))
	}
}
