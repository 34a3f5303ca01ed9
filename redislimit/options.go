package redislimit

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/levee-go/levee/breaker"
)

// Defaults of the options.
const (
	// DefaultPrefix starts every key the limiter writes.
	DefaultPrefix = "levee"
	// DefaultTimeout bounds one Redis round trip; past it the call is
	// decided by the local fallback.
	DefaultTimeout = 100 * time.Millisecond
	// DefaultHeartbeat is how often a replica renews its heartbeat (and so
	// learns how many replicas are alive).
	DefaultHeartbeat = time.Second
	// DefaultHeartbeatTTL is how long a heartbeat counts a replica alive.
	DefaultHeartbeatTTL = 3 * time.Second
	// DefaultProbeInterval is how often, while the breaker on Redis is not
	// closed, the limiter's own goroutine probes Redis.
	DefaultProbeInterval = 100 * time.Millisecond
	// DefaultWaitInOpen is how long the breaker on Redis stays open before
	// it probes.
	DefaultWaitInOpen = time.Second
)

// maxRate is the highest rate: the script keeps time in microseconds.
const maxRate = 1e6

// Option configures a Limiter. Each option documents its default and its
// valid range; an option only records its value, and New validates them
// all. A nil Option is ignored.
type Option func(*options)

type options struct {
	prefix     string
	timeout    time.Duration
	replicas   int
	heartbeat  time.Duration
	ttl        time.Duration
	probe      time.Duration
	waitOpen   time.Duration
	breaker    []breaker.Option
	replicaID  string
	localBurst int // 0: burst × share
	lease      leaseOptions
	leased     bool

	now      func() time.Time // the local clock; tests inject it
	redisNow func() int64     // tests: the script's instant in µs instead of TIME
}

func defaults() options {
	return options{
		prefix:    DefaultPrefix,
		timeout:   DefaultTimeout,
		heartbeat: DefaultHeartbeat,
		ttl:       DefaultHeartbeatTTL,
		probe:     DefaultProbeInterval,
		waitOpen:  DefaultWaitInOpen,
		now:       time.Now,
	}
}

// WithPrefix sets the start of every key the limiter writes:
// "<prefix>:<name>:{<key>}" for a bucket, "<prefix>:<name>:{replicas}" for
// the heartbeats. Default DefaultPrefix. It must be non-empty and hold no
// '{' or '}' (which would move the keys' hash tag).
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithTimeout bounds each Redis round trip: a call whose answer has not
// come by then is decided by the local fallback, and counts as a failure
// of Redis for the breaker. Default DefaultTimeout (100 ms). It must be in
// [1ms, 10s].
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithReplicas fixes how many replicas share the limit, for the local
// fallback: each falls back to rate ÷ n. Default 0: the replicas are
// counted from their heartbeats in Redis (1 until the first heartbeat
// answers), and each falls back to its share of the fleet's recent calls
// (see the package documentation). It must be >= 0.
func WithReplicas(n int) Option { return func(o *options) { o.replicas = n } }

// WithHeartbeat sets how often the replica renews its heartbeat and how
// long a heartbeat counts it alive. Default DefaultHeartbeat (1 s) and
// DefaultHeartbeatTTL (3 s). every must be in [10ms, 1m] and ttl at least
// 2 × every.
func WithHeartbeat(every, ttl time.Duration) Option {
	return func(o *options) { o.heartbeat, o.ttl = every, ttl }
}

// WithReplicaID names this replica in the heartbeats; give each replica
// its own. Default (and for ""): the host name, the process id and a
// random number.
func WithReplicaID(id string) Option { return func(o *options) { o.replicaID = id } }

// WithProbe sets how long the breaker on Redis stays open before it may
// probe, and how often the limiter's goroutine then PINGs Redis, sending
// its heartbeat as the probe once Redis answers: the limiter is back on
// the shared limit about 2 × every after Redis returns, though not before
// wait has passed since the breaker opened. Default
// DefaultWaitInOpen (1 s) and DefaultProbeInterval (100 ms). wait must be
// in [10ms, 1m], every in [1ms, wait].
func WithProbe(wait, every time.Duration) Option {
	return func(o *options) { o.waitOpen, o.probe = wait, every }
}

// WithBreaker adds options to the breaker on Redis, after its defaults:
// the last 10 calls judged once 5 have finished, open at 50% failures (a
// call past the timeout is one), the wait of WithProbe, and 2 probes in
// half-open. They are validated by breaker.New, and its errors
// are reported by New.
func WithBreaker(opts ...breaker.Option) Option {
	return func(o *options) { o.breaker = append(o.breaker, opts...) }
}

// WithLocalBurst sets the burst of each local fallback bucket. Default 0:
// the shared burst × this replica's share (see Stats.Share), at least 1.
// It must be >= 0.
func WithLocalBurst(b int) Option { return func(o *options) { o.localBurst = b } }

func (o *options) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("redislimit: "+format, args...))
	}
	if o.prefix == "" || strings.ContainsAny(o.prefix, "{}") {
		bad("WithPrefix: prefix must be non-empty without '{' or '}', got %q", o.prefix)
	}
	if o.timeout < time.Millisecond || o.timeout > 10*time.Second {
		bad("WithTimeout: timeout must be in [1ms, 10s], got %v", o.timeout)
	}
	if o.replicas < 0 {
		bad("WithReplicas: n must be >= 0, got %d", o.replicas)
	}
	if o.heartbeat < 10*time.Millisecond || o.heartbeat > time.Minute {
		bad("WithHeartbeat: every must be in [10ms, 1m], got %v", o.heartbeat)
	}
	if o.ttl < 2*o.heartbeat {
		bad("WithHeartbeat: ttl must be >= 2 × every (%v), got %v", 2*o.heartbeat, o.ttl)
	}
	if o.waitOpen < 10*time.Millisecond || o.waitOpen > time.Minute {
		bad("WithProbe: wait must be in [10ms, 1m], got %v", o.waitOpen)
	}
	if o.probe < time.Millisecond || o.probe > o.waitOpen {
		bad("WithProbe: every must be in [1ms, wait], got %v", o.probe)
	}
	if o.localBurst < 0 {
		bad("WithLocalBurst: burst must be >= 0, got %d", o.localBurst)
	}
	if o.leased {
		errs = append(errs, o.lease.validate())
	}
	return errors.Join(errs...)
}

func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, "{}") {
		return fmt.Errorf("redislimit: New: name must be non-empty without '{' or '}', got %q", name)
	}
	return nil
}

func checkRate(rate float64) error {
	if !(rate > 0 && rate <= maxRate) {
		return fmt.Errorf("redislimit: New: rate must be in (0, %g] per second, got %v", float64(maxRate), rate)
	}
	return nil
}

func checkBurst(burst int) error {
	if burst < 1 || burst > math.MaxInt32 {
		return fmt.Errorf("redislimit: New: burst must be in [1, %d], got %d", math.MaxInt32, burst)
	}
	return nil
}
