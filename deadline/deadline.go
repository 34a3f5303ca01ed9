// Package deadline refuses calls that cannot finish before their deadline:
// a call whose deadline has passed, or whose time left is shorter than its
// method's service time, would only produce work that nobody waits for.
// The Guard learns each method's service time from the calls it finishes.
package deadline

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/cacheline"
	"github.com/levee-go/levee/internal/ewma"
)

// Reasons of the guard's refusals; both mark the Decision
// DeadlineTooShort.
const (
	ReasonTooShort = "deadline shorter than the method's service time"
	ReasonExpired  = "deadline already passed"
)

// MaxLearnedMethods caps the methods whose service time a Guard learns;
// methods beyond it are judged by their deadline alone.
const MaxLearnedMethods = 4096

// StaleAfter is the least time without a successful call after which a
// learned service time is no longer used (see Guard).
const StaleAfter = time.Second

// Option configures a Guard. Options only record values; New validates
// them. A nil Option is ignored.
type Option func(*options)

type options struct {
	fixed     map[string]time.Duration
	margin    float64
	baselines Baselines
}

// Baselines tells a Guard each method's service time without contention:
// what a call takes when it runs alone, as a limiter of the calls run at
// once measures it (*runlimit.Limiter does).
type Baselines interface {
	// Baseline returns the service time without contention of calls of
	// method, or 0 if none is known. It must be safe for concurrent use.
	Baseline(method string) time.Duration
}

// WithBaselines makes the Guard judge a call against its method's service
// time without contention, as b reports it, where that is shorter than
// the mean the Guard learned (see Guard). Default none: the mean alone. A
// nil b is ignored.
func WithBaselines(b Baselines) Option {
	return func(o *options) { o.baselines = b }
}

// WithServiceTime fixes the service time of a method (a full method name)
// instead of learning it; d must be > 0.
func WithServiceTime(method string, d time.Duration) Option {
	return func(o *options) { o.fixed[method] = d }
}

// WithMargin sets the factor applied to the service time before comparing
// it with the time left: a finite number >= 0. Default 1: refuse a call
// whose time left is below its method's service time.
func WithMargin(f float64) Option {
	return func(o *options) { o.margin = f }
}

// Guard refuses calls that cannot finish in time. It checks at admission
// and again when the handler starts, after any queueing
// (admission.Rechecker). Its refusals are marked DeadlineTooShort (gRPC:
// DEADLINE_EXCEEDED).
//
// The service time of a method is fixed (WithServiceTime) or learned: an
// exponentially weighted mean (weight 1/8) of its successful calls'
// durations, or the method's service time without contention
// (WithBaselines) where that is known and shorter. The mean stretches
// with the calls that run beside the method's: calls run beyond a run
// limit at a spike's start, fifty at once on one processor, take fifty
// times as long each, and a mean raised so would refuse, as too short,
// deadlines that a call run on its turn meets with room to spare. A
// method with no sample yet is judged by its deadline alone.
// So is a method whose learned time has gone stale (no successful call
// for twice its service time, at least StaleAfter, by the calls' clock,
// admission.Call.Now, whatever instant it reads): a learned time that
// rose above the callers' deadlines in a stall would otherwise refuse
// every call for good, and no call would ever succeed to bring it down.
//
// Create one with New; the zero value is not usable. A Guard is safe for
// concurrent use.
type Guard struct {
	fixed     map[string]time.Duration
	margin    float64
	baselines Baselines

	mu      sync.Mutex                         // serialises new methods
	learned atomic.Pointer[map[string]*method] // copy on write
	epoch   time.Time
}

// method is what a Guard learned of one method. Every call of the method
// writes it: it fills a cache line, so that the calls of two methods on
// two processors do not take each other's line away (false sharing).
type method struct {
	svc  atomic.Int64 // service time, ns; 0 until the first sample
	last atomic.Int64 // when the last sample ended, ns from the Guard's epoch; noSample before the first
	_    [cacheline.Size - 16]byte
}

// noSample is a method's last before its first sample. An end is measured
// from the Guard's epoch, time.Now() at New, on the calls' own clock
// (admission.Call.Now), which may read before the epoch (an injected
// clock, a simulation's): an end before it is negative, and the first
// sample must be stored all the same, so "none yet" is not 0.
const noSample = math.MinInt64

// New returns a Guard, or an error naming every bad option.
func New(opts ...Option) (*Guard, error) {
	o := options{fixed: map[string]time.Duration{}, margin: 1}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	var errs []error
	for m, d := range o.fixed {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("deadline: WithServiceTime(%q): service time must be > 0, got %v", m, d))
		}
	}
	if !(o.margin >= 0) || math.IsInf(o.margin, 0) {
		errs = append(errs, fmt.Errorf("deadline: WithMargin: margin must be a finite number >= 0, got %v", o.margin))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	g := &Guard{fixed: o.fixed, margin: o.margin, baselines: o.baselines, epoch: time.Now()}
	g.learned.Store(&map[string]*method{})
	return g, nil
}

// Name returns "deadline".
func (g *Guard) Name() string { return "deadline" }

// Traits declares the guard's cost, admission.CostDeadline.
func (g *Guard) Traits() admission.Traits { return admission.Traits{Cost: admission.CostDeadline} }

// ServiceTime returns method's fixed service time (WithServiceTime), or
// the mean it learned (0 before its first successful call). It is not
// always what a call is judged against: a shorter baseline
// (WithBaselines) is used instead, and a stale mean not at all (see
// Guard).
func (g *Guard) ServiceTime(name string) time.Duration {
	if d, ok := g.fixed[name]; ok {
		return d
	}
	v := (*g.learned.Load())[name]
	if v == nil {
		return 0
	}
	return time.Duration(v.svc.Load())
}

// serviceTimeAt is the service time used for a call of name at now: 0
// when there is none, or the learned one is stale; the baseline
// (WithBaselines) where it is known and shorter than the learned mean.
func (g *Guard) serviceTimeAt(name string, now time.Time) time.Duration {
	if d, ok := g.fixed[name]; ok {
		return d
	}
	v := (*g.learned.Load())[name]
	if v == nil {
		return 0
	}
	st := time.Duration(v.svc.Load())
	if st == 0 || g.stale(now, v.last.Load(), max(StaleAfter, 2*st)) {
		return 0
	}
	if g.baselines != nil {
		if b := g.baselines.Baseline(name); b > 0 && b < st {
			return b
		}
	}
	return st
}

// stale reports whether more than d has passed from last, the end of a
// method's last sample (ns from the epoch), to now. The difference is
// taken unsigned: ends and now on a clock centuries from the epoch would
// overflow a signed one.
func (g *Guard) stale(now time.Time, last int64, d time.Duration) bool {
	since := int64(now.Sub(g.epoch))
	return since > last && uint64(since)-uint64(last) > uint64(d)
}

// Admit refuses a call whose deadline cannot be met.
func (g *Guard) Admit(c admission.Call) admission.Decision { return g.check(c) }

// Recheck is Admit again at the start of the handler.
func (g *Guard) Recheck(c admission.Call) admission.Decision { return g.check(c) }

func (g *Guard) check(c admission.Call) admission.Decision {
	if c.Deadline.IsZero() {
		return admission.Decision{}
	}
	left := c.Deadline.Sub(c.Now)
	if left <= 0 {
		return admission.Decision{Refused: true, Reason: ReasonExpired, DeadlineTooShort: true, Cause: admission.CauseDeadlineTooShort, Evidence: admission.EvidenceServiceTime}
	}
	if st := g.serviceTimeAt(c.Method, c.Now); st > 0 && float64(left) < float64(st)*g.margin {
		return admission.Decision{Refused: true, Reason: ReasonTooShort, DeadlineTooShort: true, Cause: admission.CauseDeadlineTooShort,
			Evidence: admission.EvidenceServiceTime, Threshold: float32(float64(st) * g.margin / 1e6)}
	}
	return admission.Decision{}
}

// Finish learns the service time from successful calls.
func (g *Guard) Finish(c admission.Call, _ admission.Permit, o admission.Outcome) {
	if o.Skipped || o.Err != nil || o.Duration <= 0 {
		return
	}
	if _, ok := g.fixed[c.Method]; ok {
		return
	}
	v := (*g.learned.Load())[c.Method]
	if v == nil {
		if v = g.add(c.Method); v == nil {
			return
		}
	}
	// Sub saturates: an end 292 years before the epoch would read as
	// noSample, and is stored as the instant after it.
	if end := max(int64(c.Now.Add(o.Duration).Sub(g.epoch)), noSample+1); end > v.last.Load() {
		v.last.Store(end)
	}
	ewma.Update(&v.svc, int64(o.Duration))
}

// add returns the learned service time of a new method, or nil when the
// guard learns MaxLearnedMethods already. Reads never lock: the map is
// replaced, never changed.
func (g *Guard) add(name string) *method {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.learned.Load()
	if v := (*m)[name]; v != nil {
		return v
	}
	if len(*m) >= MaxLearnedMethods {
		return nil
	}
	v := new(method)
	v.last.Store(noSample)
	nm := make(map[string]*method, len(*m)+1)
	for k, old := range *m {
		nm[k] = old
	}
	nm[name] = v
	g.learned.Store(&nm)
	return v
}
