package grpcguard

import (
	"errors"
	"fmt"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/retrybudget"
	"github.com/levee-go/levee/throttle"
)

// Defaults of a Client.
const (
	// DefaultMaxTargets is how many targets a Client tracks separately.
	DefaultMaxTargets = 256
	// DefaultMaxMethods is how many methods of one target get their own
	// breaker and throttle.
	DefaultMaxMethods = 256
	// DefaultMaxHoldOff caps how long one server pushback holds a target
	// off.
	DefaultMaxHoldOff = time.Minute
	// DefaultRetryBackoff and DefaultMaxRetryBackoff bound the wait before
	// a retry when the server gave no delay: see WithRetryBackoff.
	DefaultRetryBackoff    = 50 * time.Millisecond
	DefaultMaxRetryBackoff = time.Second
	// MaxAttempts is the most attempts WithRetries allows a call.
	MaxAttempts = 10
	// DefaultOpenProbes is the trickle of probes the Client's breakers let
	// through while open (breaker.WithOpenProbes): one call in 20, 5% of
	// what the callers offer a downstream the breaker has cut off. The
	// first that succeeds ends the wait in open, so the calls lost after a
	// downstream's return are about 10 calls' worth rather than the rest
	// of the wait in open; and 5% leaves room, within a tenth of the
	// calls, for the calls a breaker sends before it opens.
	DefaultOpenProbes = 20
)

// clientGuardsFixed is the most guards a Client puts in an entry itself:
// hold-off, rate, throttle, breaker.
const clientGuardsFixed = 4

// OverflowName is the target (or method) name under which a Client
// tracks the targets (or a target's methods) beyond its caps; see
// WithMaxEntries.
const OverflowName = "*"

// ClientOption configures a Client. Each option documents its default. A
// nil ClientOption is ignored.
type ClientOption func(*clientOptions)

type clientOptions struct {
	breaker    func(target, method string) []breaker.Option
	throttle   func(target, method string) []throttle.Option
	limiter    func(target string) *ratelimit.Limiter
	guards     func(target, method string) []admission.Guard
	classify   func(error) breaker.Outcome
	maxHoldOff time.Duration
	maxTargets int
	maxMethods int
	trailer    bool
	attempts   int // per call; 1: no retries
	backoff    time.Duration
	maxBackoff time.Duration
	budget     func(target string) []retrybudget.Option
	// targetLimit is WithTargetLimit's bucket, when given: built per
	// target once NewClient has checked it.
	targetLimit *struct {
		r     ratelimit.Limit
		burst int
	}
}

// WithBreaker sets how the circuit breaker of each (target, method) pair
// is configured: f returns the options given to breaker.New after
// breaker.WithClassifier(the Client's classifier) and
// breaker.WithOpenProbes(DefaultOpenProbes), so an option of f's may
// replace either (breaker.WithOpenProbes(0): no probes while open). f is
// called once per pair, when the pair's first call is made, outside any
// lock. WithBreaker(nil) creates no breakers. Default: a breaker with
// breaker.New's defaults (judge the last 100 calls, open at 50%
// failures, wait 60s, then 10 probes) and, while open, one call in
// DefaultOpenProbes let through as a probe, the first successful one
// ending the wait.
func WithBreaker(f func(target, method string) []breaker.Option) ClientOption {
	return func(o *clientOptions) { o.breaker = f }
}

// WithThrottle sets how the adaptive throttle of each (target, method)
// pair is configured: f returns the options given to throttle.New. It is
// called like WithBreaker's, so every parameter of the throttle is one of
// f's options: throttle.WithK, throttle.WithWindow,
// throttle.WithMinRequests, throttle.WithThrottledCounted. WithThrottle(nil)
// creates no throttles. Default: a throttle with throttle.New's defaults
// (K = 2 over 2 minutes, counting the calls sent, dropping nothing until
// the window holds throttle.DefaultMinRequests calls).
func WithThrottle(f func(target, method string) []throttle.Option) ClientOption {
	return func(o *clientOptions) { o.throttle = f }
}

// WithTargetLimiter gives each target (downstream) a token bucket: f
// returns the target's Limiter, or nil for no limit; it is called once
// per target, when the target's first call is made, outside any lock.
// Each call takes one token; a call that a later guard refuses gets it
// back. Several targets may share one Limiter. Default: no limit.
func WithTargetLimiter(f func(target string) *ratelimit.Limiter) ClientOption {
	return func(o *clientOptions) { o.limiter, o.targetLimit = f, nil }
}

// WithTargetLimit gives each target its own token bucket, refilling at r
// calls per second and holding burst calls (WithTargetLimiter with
// ratelimit.NewLimiter(r, burst) per target). NewClient fails unless r >=
// 0 and burst >= 1. Default: no limit.
func WithTargetLimit(r ratelimit.Limit, burst int) ClientOption {
	return func(o *clientOptions) {
		o.targetLimit = &struct {
			r     ratelimit.Limit
			burst int
		}{r, burst}
		o.limiter = nil
	}
}

// WithClientGuards adds guards of your own to each (target, method) pair,
// at most 4: f is called once per pair, when its first call is made,
// outside any lock; the guards may be shared between pairs. They are
// admitted after the built-in ones unless their cost says otherwise (for
// example a bulkhead runs before the throttle), and see the target as the
// Call's Key, so ratelimit.NewKeyedGuard(name, keyed) limits each
// downstream by its own bucket of keyed. Default: none.
func WithClientGuards(f func(target, method string) []admission.Guard) ClientOption {
	return func(o *clientOptions) { o.guards = f }
}

// WithClassifier sets how finished calls are judged by the throttles
// (Success: accepted; Failure: not accepted; Ignore: not recorded) and by
// the breakers the Client creates. It is the way for an application to
// say that an error of its own means overload: by default (ClassifyError)
// only UNAVAILABLE, DEADLINE_EXCEEDED and a server's RESOURCE_EXHAUSTED
// count against a downstream, and every other answer of the application —
// UNKNOWN, INTERNAL, NOT_FOUND, a plain Go error — is an accept. Return
// Failure for the errors that mean your downstream is overloaded, Ignore
// for those that say nothing about it, and ClassifyError(err) for the
// rest, so that local refusals stay ignored. f sees the call's error as
// the invoker returned it, a status for a call that reached the server,
// and nil for a success, which it should classify without allocating
// (the admitted path allocates nothing). It must be safe for concurrent
// use. The breakers get f with breaker.WithClassifier
// before WithBreaker's options, so a breaker.WithClassifier there judges
// the breaker alone. Default: ClassifyError. f must not be nil.
func WithClassifier(f func(err error) breaker.Outcome) ClientOption {
	return func(o *clientOptions) { o.classify = f }
}

// WithMaxHoldOff caps how long one server pushback — the
// grpc-retry-pushback-ms trailer or the google.rpc.RetryInfo detail of a
// RESOURCE_EXHAUSTED or UNAVAILABLE status — holds its target off, so a
// broken server cannot lock a client out for long. 0 disables holding
// off. NewClient fails if d < 0. Default DefaultMaxHoldOff.
func WithMaxHoldOff(d time.Duration) ClientOption {
	return func(o *clientOptions) { o.maxHoldOff = d }
}

// WithMaxEntries bounds the memory a Client uses: it tracks at most
// targets targets, and gives at most methods methods of each target their
// own breaker and throttle. Calls to a target beyond the cap share the
// overflow target OverflowName (one hold-off, one limiter from
// WithTargetLimiter's f("*"), one breaker and throttle per method); calls
// of a method beyond a target's cap share that target's overflow method
// OverflowName (one breaker and throttle). Either way such calls stay
// guarded — more coarsely, so that a flood of names cannot grow memory —
// and take a lock each time. NewClient fails unless both are >= 1.
// Default DefaultMaxTargets and DefaultMaxMethods.
func WithMaxEntries(targets, methods int) ClientOption {
	return func(o *clientOptions) { o.maxTargets, o.maxMethods = targets, methods }
}

// WithPushbackTrailer decides whether unary calls read the
// grpc-retry-pushback-ms trailer. Reading it costs nothing per call when
// the caller passes its own grpc.Trailer option, and otherwise adds one
// grpc.Trailer option of the Client's (pooled, so no allocation) without
// touching the caller's. With false only the google.rpc.RetryInfo detail
// of the status sets a hold-off (with WithRetries the trailer is still
// read, to decide on a retry). Streams always read their trailer. Default
// true.
func WithPushbackTrailer(read bool) ClientOption {
	return func(o *clientOptions) { o.trailer = read }
}

// WithRetries lets the Client retry a unary call that a server refused
// for overload, up to maxAttempts attempts in all. A call is retried only
// when:
//
//   - the server answered it with RESOURCE_EXHAUSTED (not a message-size
//     error) or UNAVAILABLE — a local refusal, by this Client's guards or
//     another's in the process, is never retried, nor is any other code;
//   - the server did not say not to: no negative grpc-retry-pushback-ms
//     trailer, and not the answer of a server whose own downstream is
//     overloaded (UpstreamOverloaded, google.rpc.ErrorInfo reason
//     ReasonUpstreamOverloaded), which levee's clients never retry;
//   - the wait before the retry ends before the call's deadline: the
//     server's delay (the pushback trailer, else the
//     google.rpc.RetryInfo detail), at most WithMaxHoldOff's cap
//     (DefaultMaxHoldOff with holding off disabled), or, without one, the
//     backoff of WithRetryBackoff; and at least what is left of the
//     target's hold-off;
//   - the target's retry budget (WithRetryBudget) grants it, before the
//     wait.
//
// Otherwise the call fails with the error of its last attempt sent: a
// retry the budget refuses, or that a guard refuses (the hold-off, the
// throttle, the breaker: each attempt is admitted like a call), or whose
// wait would outlast the deadline, ends with the server's refusal, not
// with a refusal of its own. Each attempt is guarded and finished at
// every guard as a call is, so breakers and throttles see every attempt.
//
// The Client retries itself rather than configuring grpc-go's retry
// policy, whose attempts happen below the interceptors, out of reach of
// the guards and the budget: give the ClientConn no retryPolicy (or
// grpc.WithDisableRetry()) when the Client retries. Streams are never
// retried. Retry only methods that may run twice when UNAVAILABLE can
// mean the server did part of the work (a levee server's refusals
// happen before the handler runs). NewClient fails unless maxAttempts is
// in [1, MaxAttempts]. Default 1: no retries.
func WithRetries(maxAttempts int) ClientOption {
	return func(o *clientOptions) { o.attempts = maxAttempts }
}

// WithRetryBackoff sets the wait before a retry when the server gave no
// delay: a random duration in [0, min(initial·2^(n−1), max)) before the
// n-th retry (full jitter). NewClient fails unless 0 < initial <= max.
// Default DefaultRetryBackoff and DefaultMaxRetryBackoff.
func WithRetryBackoff(initial, max time.Duration) ClientOption {
	return func(o *clientOptions) { o.backoff, o.maxBackoff = initial, max }
}

// WithRetryBudget sets the retry budget of each target: f returns the
// options given to retrybudget.New, once per target, on its first call,
// outside any lock. The budget counts the calls sent to the target (their
// first attempts) and grants a retry only while the target's retries stay
// within a ratio of them over a window, so that however many attempts
// WithRetries allows, the attempts reaching an overloaded target are at
// most (1 + ratio) × the calls. Options retrybudget.New refuses fail the
// target's calls with INTERNAL, as WithBreaker's do. WithRetryBudget(nil)
// gives no budget: only WithRetries's cap limits retries. Default:
// retrybudget.New's defaults, 10% of the calls of the last 10 seconds.
// Without WithRetries no budget is kept.
func WithRetryBudget(f func(target string) []retrybudget.Option) ClientOption {
	return func(o *clientOptions) { o.budget = f }
}

// validate checks every option at once and builds WithTargetLimit's
// buckets.
func (o *clientOptions) validate() error {
	var errs []error
	if o.classify == nil {
		errs = append(errs, errors.New("grpcguard: WithClassifier: classifier must not be nil"))
	}
	if o.maxHoldOff < 0 {
		errs = append(errs, fmt.Errorf("grpcguard: WithMaxHoldOff: want d >= 0, got %v", o.maxHoldOff))
	}
	if o.maxTargets < 1 || o.maxMethods < 1 {
		errs = append(errs, fmt.Errorf("grpcguard: WithMaxEntries: want targets >= 1 and methods >= 1, got %d and %d", o.maxTargets, o.maxMethods))
	}
	if o.attempts < 1 || o.attempts > MaxAttempts {
		errs = append(errs, fmt.Errorf("grpcguard: WithRetries: maxAttempts must be in [1, %d], got %d", MaxAttempts, o.attempts))
	}
	if !(o.backoff > 0 && o.backoff <= o.maxBackoff) {
		errs = append(errs, fmt.Errorf("grpcguard: WithRetryBackoff: want 0 < initial <= max, got %v and %v", o.backoff, o.maxBackoff))
	}
	if t := o.targetLimit; t != nil {
		if !(t.r >= 0) || t.burst < 1 {
			errs = append(errs, fmt.Errorf("grpcguard: WithTargetLimit: want rate >= 0 and burst >= 1, got rate %v, burst %d", float64(t.r), t.burst))
		} else {
			r, burst := t.r, t.burst
			o.limiter = func(string) *ratelimit.Limiter {
				l, _ := ratelimit.NewLimiter(r, burst) // checked above
				return l
			}
		}
	}
	return errors.Join(errs...)
}
