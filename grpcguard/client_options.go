package grpcguard

import (
	"errors"
	"fmt"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/ratelimit"
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
)

// clientGuardsFixed is the most guards a Client puts in an entry itself:
// hold-off, rate, throttle, breaker.
const clientGuardsFixed = 4

// OverflowName is the target (or method) name under which a Client
// tracks the targets (or a target's methods) beyond its caps; see
// WithMaxEntries.
const OverflowName = "*"

// ClientOption configures a Client. Each option documents its default.
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
	// targetLimit is WithTargetLimit's bucket, when given: built per
	// target once NewClient has checked it.
	targetLimit *struct {
		r     ratelimit.Limit
		burst int
	}
}

// WithBreaker sets how the circuit breaker of each (target, method) pair
// is configured: f returns the options given to breaker.New after
// breaker.WithClassifier(the Client's classifier), so an option of f's
// may replace the classifier too. f is called once per pair, when the
// pair's first call is made, outside any lock. WithBreaker(nil) creates no
// breakers. Default: a breaker with breaker.New's defaults (judge the last
// 100 calls, open at 50% failures, wait 60s, then 10 probes).
func WithBreaker(f func(target, method string) []breaker.Option) ClientOption {
	return func(o *clientOptions) { o.breaker = f }
}

// WithThrottle sets how the adaptive throttle of each (target, method)
// pair is configured: f returns the options given to throttle.New. It is
// called like WithBreaker's. WithThrottle(nil) creates no throttles.
// Default: a throttle with throttle.New's defaults (K = 2 over 2 minutes,
// counting the calls sent).
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
// the breakers the Client creates. It must be safe for concurrent use.
// Default: ClassifyError.
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
// of the status is read. Streams always read their trailer. Default true.
func WithPushbackTrailer(read bool) ClientOption {
	return func(o *clientOptions) { o.trailer = read }
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
