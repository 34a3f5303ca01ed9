package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
)

// ErrInvalid is wrapped by every error New returns for bad arguments.
var ErrInvalid = errors.New("loadgen: invalid argument")

// CallFunc issues one attempt of a request. ctx carries the attempt's
// deadline and the request's id (see [RequestID]); the returned error is
// classified by its gRPC status code (see [Stats]). A CallFunc is called
// from many goroutines at once.
type CallFunc func(ctx context.Context) error

type requestIDKey struct{}

// RequestID returns the id of the request a CallFunc is running: 1, 2, 3…
// in order of start within a Run, the same for every attempt of a request,
// so a CallFunc can derive an idempotency key from it. ok is false for a
// context that did not come from a Generator.
func RequestID(ctx context.Context) (id uint64, ok bool) {
	id, ok = ctx.Value(requestIDKey{}).(uint64)
	return id, ok
}

// Phase is one stretch of the schedule: Rate requests per second for
// Duration. A Rate of 0 is an idle phase. The zero value (no duration) is
// rejected by New.
type Phase struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration_ns"`
	Rate     float64       `json:"rate"`
}

// Arrivals is how requests are spaced within a phase.
type Arrivals int

const (
	// Constant spaces requests exactly 1/rate apart.
	Constant Arrivals = iota
	// Poisson draws exponentially distributed gaps with mean 1/rate, as
	// independent clients would produce.
	Poisson
)

// String returns "constant" or "poisson".
func (a Arrivals) String() string {
	switch a {
	case Constant:
		return "constant"
	case Poisson:
		return "poisson"
	}
	return fmt.Sprintf("Arrivals(%d)", int(a))
}

// ParseArrivals parses "constant" or "poisson".
func ParseArrivals(s string) (Arrivals, error) {
	switch s {
	case "constant":
		return Constant, nil
	case "poisson":
		return Poisson, nil
	}
	return 0, fmt.Errorf("%w: arrivals must be \"constant\" or \"poisson\", got %q", ErrInvalid, s)
}

// RetryPolicy makes the generator retry a request whose attempt failed
// with one of Codes. The wait before a retry is the server's pushback when
// it gave one (the grpc-retry-pushback-ms trailer, see [Pushback] and
// [PushbackFromTrailer], or a google.rpc.RetryInfo status detail); a
// negative pushback means "do not retry". Without pushback the wait is an
// exponential backoff with full jitter. The zero value retries nothing.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts including the first; values
	// <= 1 disable retries.
	MaxAttempts int
	// Backoff is the base of the exponential backoff used when the server
	// gave no pushback. Default 50ms.
	Backoff time.Duration
	// MaxBackoff caps the backoff and any pushback. Default 1s.
	MaxBackoff time.Duration
	// Codes are the status codes that are retried. Default
	// RESOURCE_EXHAUSTED and UNAVAILABLE.
	Codes []codes.Code
}

// Option configures a Generator. A nil Option is ignored.
type Option func(*options)

type options struct {
	arrivals    Arrivals
	deadline    time.Duration
	maxInFlight int
	retry       RetryPolicy
	progress    io.Writer
	seed        uint64
	clumps      time.Duration
}

// refusalCodes are the status codes counted as refusals (a server
// declining work) rather than failures.
var refusalCodes = []codes.Code{codes.ResourceExhausted, codes.Unavailable}

// WithArrivals sets how requests are spaced. Default Constant.
func WithArrivals(a Arrivals) Option { return func(o *options) { o.arrivals = a } }

// WithDeadline sets the deadline of each attempt. Default 1s.
func WithDeadline(d time.Duration) Option { return func(o *options) { o.deadline = d } }

// WithMaxInFlight caps the requests in flight at once, as a safety net for
// the generator's own memory. A scheduled request that finds the cap
// reached is not started and is counted as Dropped. Default 10000.
func WithMaxInFlight(n int) Option { return func(o *options) { o.maxInFlight = n } }

// WithRetry sets the client retry policy. Default: no retries.
func WithRetry(p RetryPolicy) Option { return func(o *options) { o.retry = p } }

// WithProgress makes Run write one progress line a second to w (usually
// os.Stderr). Default: no progress output.
func WithProgress(w io.Writer) Option { return func(o *options) { o.progress = w } }

// WithClumps starts the requests in clumps: those the arrival process
// (WithArrivals) schedules within each window of every, counted from the
// run's start, all start at the window's beginning (or the phase's, if it
// begins later), as from clients that batch their calls or wake on a
// common tick. The rate is unchanged. Default 0: no clumps. A negative
// every is an error from New.
func WithClumps(every time.Duration) Option { return func(o *options) { o.clumps = every } }

// WithSeed seeds the Poisson arrival process, so a schedule can be
// repeated. Default 1.
func WithSeed(seed uint64) Option { return func(o *options) { o.seed = seed } }

// Generator runs a schedule of phases against a CallFunc. Create one with
// New; the zero value is not usable. It holds only configuration: Run may
// be called any number of times, also concurrently, each run with its own
// state.
type Generator struct {
	call   CallFunc
	phases []Phase
	opts   options
	clock  clock

	// testHookDone, if set by in-package tests, runs after each request's
	// outcome has been recorded.
	testHookDone func()
}

// New returns a Generator that will call call on the schedule of phases.
// It returns an error wrapping ErrInvalid if call is nil, phases is empty,
// a phase has a duration <= 0 or a negative or non-finite rate, or an
// option is out of range.
func New(call CallFunc, phases []Phase, opts ...Option) (*Generator, error) {
	o := options{
		arrivals:    Constant,
		deadline:    time.Second,
		maxInFlight: 10000,
		seed:        1,
	}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if call == nil {
		return nil, fmt.Errorf("%w: call must not be nil", ErrInvalid)
	}
	if len(phases) == 0 {
		return nil, fmt.Errorf("%w: at least one phase is required", ErrInvalid)
	}
	for i, p := range phases {
		if p.Duration <= 0 {
			return nil, fmt.Errorf("%w: phase %d %q: duration must be > 0, got %v", ErrInvalid, i, p.Name, p.Duration)
		}
		if p.Rate < 0 || math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0) {
			return nil, fmt.Errorf("%w: phase %d %q: rate must be a finite number >= 0, got %v", ErrInvalid, i, p.Name, p.Rate)
		}
	}
	if o.arrivals != Constant && o.arrivals != Poisson {
		return nil, fmt.Errorf("%w: unknown arrivals %v", ErrInvalid, o.arrivals)
	}
	if o.deadline <= 0 {
		return nil, fmt.Errorf("%w: deadline must be > 0, got %v", ErrInvalid, o.deadline)
	}
	if o.clumps < 0 {
		return nil, fmt.Errorf("%w: clumps must be >= 0, got %v", ErrInvalid, o.clumps)
	}
	if o.maxInFlight < 1 {
		return nil, fmt.Errorf("%w: max in flight must be >= 1, got %d", ErrInvalid, o.maxInFlight)
	}
	if o.retry.Backoff < 0 || o.retry.MaxBackoff < 0 {
		return nil, fmt.Errorf("%w: retry backoff must be >= 0, got %v and max %v", ErrInvalid, o.retry.Backoff, o.retry.MaxBackoff)
	}
	if o.retry.Backoff == 0 {
		o.retry.Backoff = 50 * time.Millisecond
	}
	if o.retry.MaxBackoff == 0 {
		o.retry.MaxBackoff = time.Second
	}
	if o.retry.Codes == nil {
		o.retry.Codes = []codes.Code{codes.ResourceExhausted, codes.Unavailable}
	}
	return &Generator{
		call:   call,
		phases: append([]Phase(nil), phases...),
		opts:   o,
		clock:  realClock{},
	}, nil
}

// Run drives the schedule and returns its results once every started
// request has finished. Requests start on schedule whatever happens to
// earlier ones; latencies are measured from each request's scheduled
// start. If ctx is cancelled Run stops issuing, cancels the requests in
// flight, waits for them and returns the partial result with ctx's error:
// its Duration is then how long the schedule ran (see [Result.PhaseRan]).
func (g *Generator) Run(ctx context.Context) (*Result, error) {
	r := newRun(g)
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	stopProgress := func() {}
	if g.opts.progress != nil {
		stopProgress = r.startProgress()
	}
	err := r.schedule(callCtx)
	r.ran = r.total
	if err != nil {
		// The schedule ran until now: the result's rates are over that.
		r.ran = min(max(g.clock.Now().Sub(r.start), 0), r.total)
		cancel()
	}
	r.wg.Wait()
	stopProgress()
	if r.progressOut != nil {
		r.writeProgress(true)
	}
	return r.rec.result(r.start, g, r.ran), err
}

// run is the state of one Run.
type run struct {
	g        *Generator
	start    time.Time
	rng      *rand.Rand
	rec      *recorder
	wg       sync.WaitGroup
	inFlight atomic.Int64
	nextID   uint64 // last request id issued; only the scheduler touches it
	total    time.Duration
	ran      time.Duration // how long the schedule ran: total unless interrupted; set when it ends

	// Running counters for the progress line, by completion time.
	offered, dropped, succeeded, refused, timedOut, failed atomic.Int64

	progressOut  io.Writer
	lastProgress [6]int64
}

func newRun(g *Generator) *run {
	var total time.Duration
	for _, p := range g.phases {
		total += p.Duration
	}
	r := &run{
		g:     g,
		start: g.clock.Now(),
		rng:   rand.New(rand.NewPCG(g.opts.seed, 0x6c65766565)),
		total: total,
	}
	r.rec = newRecorder(g.phases, total, refusalCodes)
	return r
}

// schedule issues every request of every phase at its intended offset
// from r.start. It never waits on a request; when it falls behind it
// issues the overdue requests at once, each stamped with its intended
// time. It returns ctx's error if ctx ends first.
func (r *run) schedule(ctx context.Context) error {
	var phaseStart time.Duration
	for i, p := range r.g.phases {
		end := phaseStart + p.Duration
		if p.Rate > 0 {
			interval := float64(time.Second) / p.Rate
			k := 0
			next := phaseStart
			if r.g.opts.arrivals == Poisson {
				next = advance(phaseStart, r.rng.ExpFloat64()*interval, end)
			}
			for next < end {
				at := next
				if c := r.g.opts.clumps; c > 0 {
					at = max(phaseStart, next/c*c)
				}
				if err := r.waitUntil(ctx, at); err != nil {
					r.rec.closeAll()
					return err
				}
				// How late the scheduler is: large values mean this
				// machine could not keep up with the schedule.
				r.rec.lag(i, r.g.clock.Now().Sub(r.start)-at)
				r.launch(ctx, at, i)
				k++
				if r.g.opts.arrivals == Poisson {
					next = advance(next, r.rng.ExpFloat64()*interval, end)
				} else {
					next = advance(phaseStart, float64(k)*interval, end)
				}
			}
		}
		if err := r.waitUntil(ctx, end); err != nil {
			r.rec.closeAll()
			return err
		}
		r.rec.closeBefore(end)
		phaseStart = end
	}
	r.rec.closeAll()
	return nil
}

// advance returns the offset off nanoseconds after base, or end if that
// is not before end. off may be more than a time.Duration holds (the gap
// of a very low rate), which converted would wrap to a negative offset.
func advance(base time.Duration, off float64, end time.Duration) time.Duration {
	if off >= float64(end-base) {
		return end
	}
	return base + time.Duration(off)
}

// preciseWindow is how close to a request's start the scheduler stops
// using Go timers (millisecond resolution when idle, and they can wake
// later still) and sleeps precisely instead.
const preciseWindow = 2 * time.Millisecond

// waitUntil blocks until offset at from r.start, or ctx ends. Far from
// at it sleeps on a Go timer until preciseWindow before at; the rest it
// sleeps precisely, so requests start within tens of microseconds of
// their schedule rather than up to a millisecond late.
func (r *run) waitUntil(ctx context.Context, at time.Duration) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d := at - r.g.clock.Now().Sub(r.start)
		switch {
		case d <= 0:
			return nil
		case d <= preciseWindow:
			r.g.clock.Sleep(d)
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.g.clock.After(d - preciseWindow):
		}
	}
}

// launch starts the request scheduled at offset at, in phase, unless the
// max-in-flight cap is reached. Only the scheduling goroutine calls it.
func (r *run) launch(ctx context.Context, at time.Duration, phase int) {
	r.offered.Add(1)
	r.rec.closeBefore(at)
	if r.inFlight.Load() >= int64(r.g.opts.maxInFlight) {
		r.dropped.Add(1)
		r.rec.drop(at, phase)
		return
	}
	r.rec.offer(at, phase)
	r.inFlight.Add(1)
	r.wg.Add(1)
	r.nextID++
	id := r.nextID
	go func() {
		defer r.wg.Done()
		defer r.inFlight.Add(-1)
		r.do(ctx, id, at, phase)
	}()
}

// do runs one request to its final outcome, retrying as the policy says,
// and records it.
func (r *run) do(ctx context.Context, id uint64, at time.Duration, phase int) {
	o := &r.g.opts
	ctx = context.WithValue(ctx, requestIDKey{}, id)
	retries := 0
	var err error
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, o.deadline)
		err = r.g.call(actx)
		cancel()
		if err == nil || attempt >= o.retry.MaxAttempts || !containsCode(o.retry.Codes, codeOf(err)) {
			break
		}
		wait, ok := retryDelay(err, attempt, o.retry)
		if !ok || r.sleep(ctx, wait) != nil {
			break
		}
		retries++
	}
	latency := r.g.clock.Now().Sub(r.start) - at
	out := r.rec.complete(at, phase, err, latency, retries)
	switch out {
	case outcomeSucceeded:
		r.succeeded.Add(1)
	case outcomeRefused:
		r.refused.Add(1)
	case outcomeTimedOut:
		r.timedOut.Add(1)
	default:
		r.failed.Add(1)
	}
	if r.g.testHookDone != nil {
		r.g.testHookDone()
	}
}

func (r *run) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.g.clock.After(d):
		return nil
	}
}

// retryDelay returns how long to wait before retry number attempt, and
// false if the server asked not to retry.
func retryDelay(err error, attempt int, p RetryPolicy) (time.Duration, bool) {
	if d, ok := pushbackOf(err); ok {
		if d < 0 {
			return 0, false
		}
		return min(d, p.MaxBackoff), true
	}
	backoff := p.Backoff << min(attempt-1, 30)
	if backoff <= 0 || backoff > p.MaxBackoff {
		backoff = p.MaxBackoff
	}
	// Full jitter: uniform in [0, backoff].
	return rand.N(backoff + 1), true
}

func containsCode(cs []codes.Code, c codes.Code) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}
