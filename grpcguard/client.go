package grpcguard

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/holdoff"
	"github.com/levee-go/levee/internal/clock"
	"github.com/levee-go/levee/retrybudget"
	"github.com/levee-go/levee/throttle"
)

// Client guards the calls a gRPC client makes, per downstream target
// (ClientConn.Target) and method. Before a call is sent it asks, cheapest
// first:
//
//   - the target's hold-off: after a server refused a call with a retry
//     delay (the grpc-retry-pushback-ms trailer, or a google.rpc.RetryInfo
//     detail as levee servers send) the target's calls are refused locally
//     until the delay has passed (capped by WithMaxHoldOff);
//   - the target's token bucket (WithTargetLimit, WithTargetLimiter);
//   - the pair's adaptive throttle (WithThrottle);
//   - the pair's circuit breaker (WithBreaker);
//   - guards of your own (WithClientGuards).
//
// A call any of them refuses is never sent: it fails at once with
// UNAVAILABLE (see ErrClientRefused), and the guards that had admitted it
// give back what they granted. A call that is sent is finished at every
// guard with its error and duration; the classifier (WithClassifier,
// default ClassifyError) decides what the throttle and the breakers count
// as failures: by default only the backend's overload answers
// (UNAVAILABLE, DEADLINE_EXCEEDED, a server's RESOURCE_EXHAUSTED), never
// an application error such as UNKNOWN, INTERNAL or NOT_FOUND. A local
// refusal is never counted as the backend's failure, by this Client's
// guards or by breakers further out.
//
// Breakers, throttles and buckets are created lazily, on a target's or a
// pair's first call, and live as long as the Client; their number is
// bounded (WithMaxEntries). A stream is admitted once, when it opens, and
// finished when it ends: RecvMsg returns an error or io.EOF (or a message,
// for a stream without server streaming), SendMsg or Header fail, or its
// context ends. Its duration is the stream's lifetime, so give breakers of
// long-lived streams no slow-call threshold.
//
// With WithRetries it retries a unary call a server refused for
// overload, each attempt admitted and finished like a call, within the
// call's deadline and the target's retry budget (WithRetryBudget); it
// never retries a local refusal or a server's UpstreamOverloaded answer.
//
// A pair's breaker lets a trickle of probes through while open (one call
// in DefaultOpenProbes, see WithBreaker), and the first that succeeds
// ends its wait, so the pair serves again within a few calls of the
// downstream's return. When a pair has both a throttle and a breaker, the
// throttle defers to the breaker while the breaker is open or half-open,
// letting its probes through, and forgets its window when the probes
// close the breaker: after an incident the throttle's window holds only
// failures, and it would otherwise starve the probes and then keep
// dropping calls for up to a window after the downstream has recovered.
//
// Install it with DialOptions, or UnaryClientInterceptor and
// StreamClientInterceptor, inside any retry interceptor of your own so
// that each attempt is guarded (or let it retry, WithRetries). Create one
// with NewClient; the zero value is not usable. A Client needs no Close: it starts no goroutine of its own (a
// stream's context.AfterFunc runs only if the stream's context ends before
// the stream does, and is stopped when the stream ends). It is safe for
// concurrent use. The admitted unary path allocates nothing.
type Client struct {
	o     clientOptions
	clock clock.Mono // in-package tests set clock.Fake
	// wait sleeps before a retry, false if ctx ended first; in-package
	// tests replace it.
	wait func(ctx context.Context, d time.Duration) bool
	// jitter returns a uniform number in [0, 1) for the retry backoff;
	// in-package tests replace it.
	jitter func() float64

	mu      sync.Mutex            // serialises changes to the registries
	targets cowMap[*clientTarget] // with the overflow target
	judge   throttle.Judge        // Judge(the classifier), made once

	boxes sync.Pool // *trailerBox
}

// clientTarget is the state of one downstream target.
type clientTarget struct {
	name    string
	hold    *holdoff.Gate
	budget  *retrybudget.Budget  // nil: no retries, or no budget
	err     error                // not nil: the budget could not be built
	limit   admission.Guard      // nil: no bucket
	methods cowMap[*clientEntry] // with the target's overflow method
}

// clientEntry is the state of one (target, method) pair.
type clientEntry struct {
	target *clientTarget
	chain  *admission.Chain
	brk    *breaker.Breaker
	thr    *throttle.Throttle
	// refusals caches, per guard, the last refusal without a retry delay,
	// so that an open breaker refuses without allocating.
	refusals [admission.MaxGuards]atomic.Pointer[clientRefusal]
	// err, if not nil, fails every call of a pair whose guards could not
	// be built.
	err error
}

// NewClient returns a Client configured by opts. Without options each
// (target, method) pair gets a breaker and a throttle with their packages'
// defaults, and server pushbacks hold a target off for up to
// DefaultMaxHoldOff. It returns an error naming the option when an option
// is out of range.
func NewClient(opts ...ClientOption) (*Client, error) {
	o := clientOptions{
		breaker:    func(string, string) []breaker.Option { return nil },
		throttle:   func(string, string) []throttle.Option { return nil },
		classify:   ClassifyError,
		maxHoldOff: DefaultMaxHoldOff,
		maxTargets: DefaultMaxTargets,
		maxMethods: DefaultMaxMethods,
		trailer:    true,
		attempts:   1,
		backoff:    DefaultRetryBackoff,
		maxBackoff: DefaultMaxRetryBackoff,
		budget:     func(string) []retrybudget.Option { return nil },
	}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	c := &Client{o: o, clock: clock.New(), wait: sleep, jitter: rand.Float64}
	c.judge = Judge(o.classify)
	c.targets.init()
	c.boxes.New = func() any {
		b := new(trailerBox)
		b.opt = grpc.Trailer(&b.md)
		return b
	}
	return c, nil
}

// now reads the clock: monotonic only, as Server.now.
func (c *Client) now() time.Time { return c.clock.Now() }

// DialOptions returns the options that install the Client in a
// grpc.ClientConn: both interceptors, chained so that they compose with
// others.
func (c *Client) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(c.unaryCall),
		grpc.WithChainStreamInterceptor(c.streamCall),
	}
}

// UnaryClientInterceptor returns the unary interceptor; see Client.
func (c *Client) UnaryClientInterceptor() grpc.UnaryClientInterceptor { return c.unaryCall }

// StreamClientInterceptor returns the stream interceptor; see Client.
func (c *Client) StreamClientInterceptor() grpc.StreamClientInterceptor { return c.streamCall }

// trailerBox is a pooled grpc.Trailer option with the slice of call
// options it is appended to.
type trailerBox struct {
	md   metadata.MD
	opt  grpc.CallOption // grpc.Trailer(&md)
	opts []grpc.CallOption
}

func (c *Client) unaryCall(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	target := cc.Target()
	e := c.entry(target, method)
	if e.err != nil {
		return e.err
	}
	ctx = propagateCriticality(ctx)
	if c.o.attempts > 1 {
		return c.retrying(ctx, e, target, method, req, reply, cc, invoker, opts)
	}
	_, err := c.attempt(ctx, e, target, method, req, reply, cc, invoker, opts, nil, nil)
	return err
}

// attempt makes one guarded attempt of a unary call: admission, the call,
// its finish at every guard. sent is false when a guard refused it (err
// is then the refusal). count, if not nil, counts the attempt as a
// request once admitted; hint, if not nil, is filled from the trailer of
// an attempt that failed.
func (c *Client) attempt(ctx context.Context, e *clientEntry, target, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, count *retrybudget.Budget, hint *retryHint) (sent bool, err error) {
	var call admission.Call
	call.Init(ctx, method, c.now())
	call.Key = target
	var permits admission.Permits
	if i, d := e.chain.Enter(&call, &permits); i >= 0 {
		return false, e.refusal(i, d)
	}
	if call.NowStale {
		call.Now, call.NowStale = c.now(), false // the call is sent after its guards' waits
	}
	if err := ctx.Err(); err != nil {
		return false, c.unsent(e, &call, &permits, err)
	}
	if count != nil {
		count.RequestAt(call.Now)
	}
	var box *trailerBox
	var md *metadata.MD
	if c.o.trailer || hint != nil {
		if md = userTrailer(opts); md == nil {
			box = c.boxes.Get().(*trailerBox)
			box.opts = append(append(box.opts[:0], opts...), box.opt)
			opts, md = box.opts, &box.md
		}
	}
	// A panic below (an interceptor chained after this one, a codec)
	// that a caller recovers from gives back what the guards granted, with
	// no verdict: a breaker's half-open probe must not stay taken.
	invoked := false
	defer func() {
		if !invoked {
			e.skip(&call, &permits)
		}
	}()
	err = invoker(ctx, method, req, reply, cc, opts...)
	invoked = true
	learn := md
	if !c.o.trailer {
		learn = nil // read for the retry only
	}
	c.finish(e, &call, &permits, err, learn)
	if err != nil && hint != nil {
		hint.read(md)
	}
	if box != nil {
		box.md = nil
		clear(box.opts[:cap(box.opts)])
		c.boxes.Put(box)
	}
	return true, err
}

// unsent gives back what the guards granted a call whose context ended,
// with err, before it was sent (after a guard's wait, or before the
// call), and returns the status grpc-go fails such a call with, without
// sending it. Its guards judge nothing from it: it says nothing of the
// downstream, and a breaker or throttle that counted it as a failure
// would open on a caller's own spent deadlines against a healthy server.
func (c *Client) unsent(e *clientEntry, call *admission.Call, permits *admission.Permits, err error) error {
	e.skip(call, permits)
	return status.FromContextError(err).Err()
}

// skip finishes, as skipped, a call that passed its guards (Enter) and
// was then not seen through: its context ended before it was sent, or
// the invoker or streamer panicked. Its guards give back what they
// granted and judge nothing. It is Chain.Finish, not Chain.Abandon, which
// is for a call admitted in two steps that never started: the chain
// counted this one as passed, and Abandon would count it again.
func (e *clientEntry) skip(call *admission.Call, permits *admission.Permits) {
	e.chain.Finish(call, permits, admission.Outcome{Skipped: true})
}

// userTrailer returns the metadata a caller's own grpc.Trailer option
// fills, if opts hold one.
func userTrailer(opts []grpc.CallOption) *metadata.MD {
	for _, o := range opts {
		if t, ok := o.(grpc.TrailerCallOption); ok && t.TrailerAddr != nil {
			return t.TrailerAddr
		}
	}
	return nil
}

// finish ends a sent call at every guard that admitted it, after learning
// the server's retry delay from a refusal. md is the call's trailer, or
// nil. The clock is read only if the call failed (a pushback is measured
// from its end) or a guard uses the duration.
func (c *Client) finish(e *clientEntry, call *admission.Call, permits *admission.Permits, err error, md *metadata.MD) {
	o := admission.Outcome{Err: err}
	if err != nil || e.chain.Timed() {
		end := c.now()
		o.Duration = end.Sub(call.Now)
		if err != nil {
			o.Overload = IsOverload(err)
			c.learn(e.target, err, md, end)
		}
	}
	e.chain.Finish(call, permits, o)
}

// learn holds target off for the retry delay of a server refusal: a
// RESOURCE_EXHAUSTED or UNAVAILABLE status from the server (not a local
// refusal) with a non-negative pushback trailer or, failing that, a
// RetryInfo detail.
func (c *Client) learn(t *clientTarget, err error, md *metadata.MD, now time.Time) {
	if c.o.maxHoldOff == 0 || isLocalRefusal(err) {
		return
	}
	if code := status.Code(err); code != codes.ResourceExhausted && code != codes.Unavailable {
		return
	}
	d, ok := pushbackDelay(md)
	if !ok {
		d, ok = RetryDelay(err)
	}
	if !ok || d <= 0 {
		return
	}
	t.hold.Extend(now.Add(min(d, c.o.maxHoldOff)))
}

// pushbackDelay reads the pushback trailer: its delay, and false when
// there is none, or it is malformed or negative (do not retry: there is
// no delay to wait).
func pushbackDelay(md *metadata.MD) (time.Duration, bool) {
	if md == nil {
		return 0, false
	}
	v := (*md)[PushbackTrailer]
	if len(v) == 0 {
		return 0, false
	}
	ms, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || ms < 0 {
		return 0, false
	}
	if ms > int64(math.MaxInt64/time.Millisecond) {
		return admission.Never, true
	}
	return time.Duration(ms) * time.Millisecond, true
}

func (c *Client) streamCall(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	target := cc.Target()
	e := c.entry(target, method)
	if e.err != nil {
		return nil, e.err
	}
	ctx = propagateCriticality(ctx)
	s := &guardedClientStream{c: c, e: e, serverStreams: desc.ServerStreams}
	s.call.Init(ctx, method, c.now())
	s.call.Key = target
	if i, d := e.chain.Enter(&s.call, &s.permits); i >= 0 {
		return nil, e.refusal(i, d)
	}
	if s.call.NowStale {
		s.call.Now, s.call.NowStale = c.now(), false // as attempt's
	}
	if err := ctx.Err(); err != nil {
		return nil, c.unsent(e, &s.call, &s.permits, err)
	}
	opened := false
	defer func() {
		if !opened { // the streamer panicked: as attempt's invoker
			e.skip(&s.call, &s.permits)
		}
	}()
	cs, err := streamer(ctx, desc, cc, method, opts...)
	opened = true
	if err != nil {
		c.finish(e, &s.call, &s.permits, err, nil)
		return nil, err
	}
	s.ClientStream = cs
	s.stop = context.AfterFunc(ctx, s.abandon)
	return s, nil
}

// Breaker returns the circuit breaker of the pair (target, method), or
// nil if the pair has made no call yet or the Client creates no breakers.
// Use it to watch the breaker (Snapshot) or to operate it (ForceOpen,
// Disable, Reset). target is the ClientConn's Target().
func (c *Client) Breaker(target, method string) *breaker.Breaker {
	if e := c.lookup(target, method); e != nil {
		return e.brk
	}
	return nil
}

// Throttle returns the adaptive throttle of the pair (target, method), or
// nil if the pair has made no call yet or the Client creates no
// throttles.
func (c *Client) Throttle(target, method string) *throttle.Throttle {
	if e := c.lookup(target, method); e != nil {
		return e.thr
	}
	return nil
}

// RetryBudget returns the retry budget of target, or nil if the target
// has made no call yet or the Client keeps no budget (no WithRetries, or
// WithRetryBudget(nil)). Its Snapshot tells the retries granted and
// refused; metrics.Registry.AddRetryBudget (or otelmetrics') exports them.
func (c *Client) RetryBudget(target string) *retrybudget.Budget {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.targets.lookup(target); ok {
		return t.budget
	}
	return nil
}

// HoldOff returns how long target is still held off after a server
// pushback: 0 when its calls are not being refused for that reason.
func (c *Client) HoldOff(target string) time.Duration {
	t, ok := c.targets.get(target)
	if !ok {
		return 0
	}
	return t.hold.Left(c.now())
}

// Stats returns the decision counts of every guard of every (target,
// method) pair; Rule is "target method". It allocates; call it at scrape
// time, not per call.
func (c *Client) Stats() []admission.GuardStats {
	c.mu.Lock()
	var entries []*clientEntry
	for _, t := range c.targets.all() {
		entries = append(entries, t.methods.all()...)
	}
	c.mu.Unlock()
	var out []admission.GuardStats
	for _, e := range entries {
		if e.chain != nil {
			out = append(out, e.chain.Stats()...)
		}
	}
	return out
}
