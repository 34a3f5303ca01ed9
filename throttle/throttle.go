package throttle

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/internal/window"
)

// refusal is the type of ErrThrottled. It reports LocalRefusal, the marker
// breakers use to recognise calls refused in this process.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

// LocalRefusal reports that the call never left the process.
func (r *refusal) LocalRefusal() bool { return true }

// ErrThrottled is the error for a call the throttle dropped (AllowAt
// returned false); the call was not made. It reports LocalRefusal() == true,
// so a breaker that admitted the call ignores it by default
// (breaker.WithLocalRefusalsCounted).
var ErrThrottled error = &refusal{"throttle: dropped by adaptive client throttling"}

// Option configures a Throttle; each documents its default. An option
// only records its value; New validates them all and reports every bad
// one. A nil Option is ignored.
type Option func(*options)

// DefaultMinRequests is how many requests the window must hold before
// the throttle drops anything (WithMinRequests): 100, the order of
// magnitude the SRE book's clients and kratos's aegis use.
const DefaultMinRequests = 100

type options struct {
	k              float64
	minRequests    int
	size           time.Duration
	bins           int
	countThrottled bool
	random         func() float64
	now            func() time.Time // unexported clock; tests replace it
}

// validate reports every bad value, each naming its option.
func (o *options) validate() error {
	var errs []error
	if !(o.k >= 1) || math.IsInf(o.k, 0) {
		errs = append(errs, fmt.Errorf("throttle: WithK: k must be >= 1 and finite, got %v", o.k))
	}
	if o.minRequests < 0 {
		errs = append(errs, fmt.Errorf("throttle: WithMinRequests: n must be >= 0, got %d", o.minRequests))
	}
	if o.bins < 1 || o.bins > window.MaxBins || o.size <= 0 || o.size/time.Duration(o.bins) < time.Millisecond {
		errs = append(errs, fmt.Errorf("throttle: WithWindow: want size > 0, bins in [1, %d] and size/bins >= 1ms, got %v and %d bins", window.MaxBins, o.size, o.bins))
	}
	if o.random == nil {
		errs = append(errs, errors.New("throttle: WithRandom: random source must not be nil"))
	}
	return errors.Join(errs...)
}

// WithK sets the multiplier K: the client keeps sending until requests reach
// K times accepts. Default 2. Lower values throttle sooner. k must be >= 1
// and finite.
func WithK(k float64) Option {
	return func(o *options) { o.k = k }
}

// WithMinRequests sets how many requests the window must hold before the
// throttle drops any call: with fewer, the drop probability is 0 whatever
// the backend answered, so that a few failures — two errors after one
// success would otherwise drop one call in four — never throttle a
// client whose traffic is too thin to say anything about the backend's
// load. From n requests on, the SRE formula applies. Requests are those
// of WithThrottledCounted: the calls sent, by default. n must be >= 0; 0
// applies the formula from the first request. Default
// DefaultMinRequests (100).
func WithMinRequests(n int) Option {
	return func(o *options) { o.minRequests = n }
}

// WithWindow sets the sliding window over which requests and accepts are
// counted, kept in bins bins of size/bins each. Default 2 minutes in 120
// bins. It needs size > 0, bins in [1, 10_000] and size/bins >= 1ms
// (10,000 bins of 1s cover 2h46m; a longer window takes wider bins).
func WithWindow(size time.Duration, bins int) Option {
	return func(o *options) { o.size, o.bins = size, bins }
}

// WithThrottledCounted decides whether calls the throttle dropped count as
// requests. Default false: only calls sent to the backend count. True is
// the SRE book's definition. The package documentation compares the two.
func WithThrottledCounted(count bool) Option {
	return func(o *options) { o.countThrottled = count }
}

// WithRandom sets the source of the uniform random numbers in [0, 1) that
// decide each drop. It is called outside the throttle's lock, only when the
// drop probability is above 0, and must be safe for concurrent use if the
// Throttle is. Default: math/rand/v2's Float64. f must not be nil.
func WithRandom(f func() float64) Option {
	return func(o *options) { o.random = f }
}

// Throttle is an adaptive client-side throttle for one backend (or one
// backend method). Create one with New (by default K = 2 over a 2-minute
// window of 1-second bins, counting only the calls sent, dropping nothing
// until the window holds DefaultMinRequests requests); the zero value is
// not usable. A Throttle is safe for concurrent use.
type Throttle struct {
	o        options
	base     time.Time // taken at New, with a monotonic reading
	baseUnix int64

	mu   sync.Mutex
	bins *window.Bins // requests, accepts

	allowed   atomic.Uint64
	throttled atomic.Uint64
}

// New returns a Throttle configured by opts: by default K = 2 over a
// 2-minute window, counting only the calls sent, from
// DefaultMinRequests requests in the window on. It returns an error
// naming every bad option value.
func New(opts ...Option) (*Throttle, error) {
	o := options{k: 2, minRequests: DefaultMinRequests, size: 2 * time.Minute, bins: 120, random: rand.Float64, now: time.Now}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	t := &Throttle{o: o, bins: window.New(o.size, o.bins)}
	t.base = time.Now()
	t.baseUnix = t.base.UnixNano()
	return t, nil
}

// Allow reports whether a call may be sent now; it is AllowAt at the
// current time.
func (t *Throttle) Allow() bool { return t.AllowAt(t.o.now()) }

// AllowAt reports whether a call may be sent at time now. It returns false
// with the drop probability computed over the window ending at now; the
// caller then fails the call locally (with ErrThrottled). A call that is
// allowed must be reported with RecordAt once the backend has answered.
func (t *Throttle) AllowAt(now time.Time) bool {
	n := t.nanos(now)
	t.mu.Lock()
	p := t.prob(t.bins.Total(n))
	t.mu.Unlock()
	if p <= 0 || t.o.random() >= p {
		t.allowed.Add(1)
		return true
	}
	t.throttled.Add(1)
	if t.o.countThrottled {
		t.mu.Lock()
		t.bins.Add(n, window.Sums{1, 0})
		t.mu.Unlock()
	}
	return false
}

// Record reports the backend's answer to an allowed call now; it is
// RecordAt at the current time.
func (t *Throttle) Record(accepted bool) { t.RecordAt(t.o.now(), accepted) }

// RecordAt reports, at time now, that an allowed call was answered by the
// backend: accepted if the backend did the work, whatever the answer; not
// accepted if it refused or failed to answer. A call abandoned by the
// caller before the backend answered may be left unreported.
func (t *Throttle) RecordAt(now time.Time, accepted bool) {
	s := window.Sums{1, 0}
	if accepted {
		s[1] = 1
	}
	n := t.nanos(now)
	t.mu.Lock()
	t.bins.Add(n, s)
	t.mu.Unlock()
}

// Reset forgets the window: the drop probability is 0 until the window
// holds WithMinRequests requests again. Use it when something surer than the window says the
// backend is healthy again — levee's gRPC client resets the throttle of a
// (target, method) pair when the pair's circuit breaker closes after its
// half-open probes succeeded — so that the failures of an incident that
// has ended stop dropping calls. The counters of Snapshot (Allowed,
// Throttled) are kept.
func (t *Throttle) Reset() {
	t.mu.Lock()
	t.bins.Reset()
	t.mu.Unlock()
}

// Probability returns the current drop probability; it is ProbabilityAt at
// the current time.
func (t *Throttle) Probability() float64 { return t.ProbabilityAt(t.o.now()) }

// ProbabilityAt returns the drop probability over the window ending at now.
func (t *Throttle) ProbabilityAt(now time.Time) float64 {
	n := t.nanos(now)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.prob(t.bins.Total(n))
}

// prob is the SRE formula over window sums {requests, accepts}, 0 below
// the minimum number of requests.
func (t *Throttle) prob(s window.Sums) float64 {
	if s[0] < int64(t.o.minRequests) {
		return 0
	}
	req := float64(s[0])
	return max(0, (req-t.o.k*float64(s[1]))/(req+1))
}

// Snapshot is a point-in-time view of a Throttle for metrics. It is a
// plain copy with no lock of its own: safe to copy and to read
// concurrently, not to write from several goroutines at once. The
// zero value is an empty window that has decided nothing.
type Snapshot struct {
	Requests, Accepts int64   // in the window ending at the snapshot's time
	Probability       float64 // drop probability at that time
	Allowed           uint64  // AllowAt calls that returned true, since New
	Throttled         uint64  // AllowAt calls that returned false, since New
}

// Snapshot returns the throttle's counters now; it is SnapshotAt at the
// current time.
func (t *Throttle) Snapshot() Snapshot { return t.SnapshotAt(t.o.now()) }

// SnapshotAt returns the throttle's window and counters at time now.
func (t *Throttle) SnapshotAt(now time.Time) Snapshot {
	n := t.nanos(now)
	t.mu.Lock()
	s := t.bins.Total(n)
	t.mu.Unlock()
	return Snapshot{
		Requests:    s[0],
		Accepts:     s[1],
		Probability: t.prob(s),
		Allowed:     t.allowed.Load(),
		Throttled:   t.throttled.Load(),
	}
}

// nanos converts t to Unix nanoseconds, measured from t.base so that wall
// clock times (with a monotonic reading) are immune to clock steps, while
// injected times convert exactly to UnixNano and bins align the same way
// in every run.
func (t *Throttle) nanos(now time.Time) int64 {
	return t.baseUnix + int64(now.Sub(t.base))
}
