package grpcguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

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

// ErrClientRefused matches (errors.Is) every error with which a Client
// refuses a call locally. Such an error also has the status UNAVAILABLE
// (status.Code), a message naming the guard and the target, a
// google.rpc.RetryInfo detail when the guard knows when a retry may
// succeed (RetryDelay reads it), reports LocalRefusal() == true, and wraps
// breaker.ErrOpen, breaker.ErrTooManyCalls or throttle.ErrThrottled when
// the breaker or the throttle refused.
var ErrClientRefused = errors.New("grpcguard: call refused by a client guard")

// ClientOption configures a Client. Each option documents its default.
type ClientOption func(*clientOptions)

type clientOptions struct {
	breaker    func(target, method string) []breaker.Option
	throttle   func(target, method string) []throttle.Option
	limiter    func(target string) *ratelimit.Limiter
	guards     func(target, method string) []Guard
	classify   func(error) breaker.Outcome
	maxHoldOff time.Duration
	maxTargets int
	maxMethods int
	trailer    bool
	err        error // from an option's own validation
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
	return func(o *clientOptions) { o.limiter = f }
}

// WithTargetLimit gives each target its own token bucket, refilling at r
// calls per second and holding burst calls (WithTargetLimiter with
// ratelimit.NewLimiter(r, burst) per target). NewClient fails unless r >=
// 0 and burst >= 1. Default: no limit.
func WithTargetLimit(r ratelimit.Limit, burst int) ClientOption {
	return func(o *clientOptions) {
		if !(r >= 0) || burst < 1 {
			o.err = fmt.Errorf("grpcguard: WithTargetLimit: want rate >= 0 and burst >= 1, got rate %v, burst %d", float64(r), burst)
			return
		}
		o.limiter = func(string) *ratelimit.Limiter {
			l, _ := ratelimit.NewLimiter(r, burst) // r and burst are checked above
			return l
		}
	}
}

// WithClientGuards adds guards of your own to each (target, method) pair,
// at most 4: f is called once per pair, when its first call is made,
// outside any lock; the guards may be shared between pairs. They are
// admitted after the built-in ones unless their cost says otherwise (for
// example a Bulkhead runs before the throttle), and see the target as the
// Call's Key, so PerKey(name, keyed) limits each downstream by its own
// bucket of keyed. Default: none.
func WithClientGuards(f func(target, method string) []Guard) ClientOption {
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
// as failures. A local refusal is never counted as the backend's failure,
// by this Client's guards or by breakers further out.
//
// Breakers, throttles and buckets are created lazily, on a target's or a
// pair's first call, and live as long as the Client; their number is
// bounded (WithMaxEntries). A stream is admitted once, when it opens, and
// finished when it ends: RecvMsg returns an error or io.EOF (or a message,
// for a stream without server streaming), SendMsg or Header fail, or its
// context ends. Its duration is the stream's lifetime, so give breakers of
// long-lived streams no slow-call threshold.
//
// Install it with DialOptions, or UnaryClientInterceptor and
// StreamClientInterceptor, inside any retry interceptor so that each
// attempt is guarded. Create one with NewClient; the zero value is not
// usable. A Client needs no Close: it starts no goroutine of its own (a
// stream's context.AfterFunc runs only if the stream's context ends before
// the stream does, and is stopped when the stream ends). It is safe for
// concurrent use. The admitted unary path allocates nothing.
type Client struct {
	o     clientOptions
	epoch time.Time
	clock func() time.Time // for in-package tests; nil: the monotonic clock

	targets atomic.Pointer[map[string]*clientTarget] // copy on write
	mu      sync.Mutex                               // serialises changes to the maps
	over    *clientTarget                            // overflow target, under mu

	boxes sync.Pool // *trailerBox
}

// clientTarget is the state of one downstream target.
type clientTarget struct {
	name     string
	hold     holdOff
	limit    Guard                                   // nil: no bucket
	methods  atomic.Pointer[map[string]*clientEntry] // copy on write
	overflow *clientEntry                            // under Client.mu
}

// clientEntry is the state of one (target, method) pair.
type clientEntry struct {
	target *clientTarget
	rule   *rule
	brk    *breaker.Breaker
	thr    *throttle.Throttle
	// refusals caches, per guard, the last refusal without a retry delay,
	// so that an open breaker refuses without allocating.
	refusals [maxGuards]atomic.Pointer[clientRefusal]
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
	}
	for _, opt := range opts {
		opt(&o)
		if o.err != nil {
			return nil, o.err
		}
	}
	switch {
	case o.classify == nil:
		return nil, errors.New("grpcguard: WithClassifier: classifier must not be nil")
	case o.maxHoldOff < 0:
		return nil, fmt.Errorf("grpcguard: WithMaxHoldOff: want d >= 0, got %v", o.maxHoldOff)
	case o.maxTargets < 1 || o.maxMethods < 1:
		return nil, fmt.Errorf("grpcguard: WithMaxEntries: want targets >= 1 and methods >= 1, got %d and %d", o.maxTargets, o.maxMethods)
	}
	c := &Client{o: o, epoch: time.Now()}
	c.targets.Store(&map[string]*clientTarget{})
	c.boxes.New = func() any {
		b := new(trailerBox)
		b.opt = grpc.Trailer(&b.md)
		return b
	}
	return c, nil
}

// now reads the clock: monotonic only, as Server.now.
func (c *Client) now() time.Time {
	if c.clock != nil {
		return c.clock()
	}
	return c.epoch.Add(time.Since(c.epoch))
}

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
	call := c.call(ctx, target, method)
	var permits [maxGuards]Permit
	mask, i, d := e.rule.admit(&call, &permits)
	if i >= 0 {
		return e.refusal(i, d)
	}
	e.rule.passed.Add(1)
	var box *trailerBox
	var md *metadata.MD
	if c.o.trailer {
		if md = userTrailer(opts); md == nil {
			box = c.boxes.Get().(*trailerBox)
			box.opts = append(append(box.opts[:0], opts...), box.opt)
			opts, md = box.opts, &box.md
		}
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	c.finish(e, call, mask, &permits, err, md)
	if box != nil {
		box.md = nil
		clear(box.opts[:cap(box.opts)])
		c.boxes.Put(box)
	}
	return err
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

// call describes a client call at the time of its admission.
func (c *Client) call(ctx context.Context, target, method string) Call {
	call := Call{Ctx: ctx, Method: method, Key: target, Now: c.now()}
	if dl, ok := ctx.Deadline(); ok {
		call.Deadline = dl
	}
	return call
}

// finish ends a sent call at every guard that admitted it, after learning
// the server's retry delay from a refusal. md is the call's trailer, or
// nil. The clock is read only if the call failed (a pushback is measured
// from its end) or a guard uses the duration.
func (c *Client) finish(e *clientEntry, call Call, mask uint32, permits *[maxGuards]Permit, err error, md *metadata.MD) {
	o := Outcome{Err: err}
	if err != nil || e.rule.timed {
		end := c.now()
		o.Duration = end.Sub(call.Now)
		if err != nil {
			c.learn(e.target, err, md, end)
		}
	}
	e.rule.finish(&call, mask, permits, o)
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
	t.hold.extend(now.Add(min(d, c.o.maxHoldOff)))
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
		return never, true
	}
	return time.Duration(ms) * time.Millisecond, true
}

func (c *Client) streamCall(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	target := cc.Target()
	e := c.entry(target, method)
	call := c.call(ctx, target, method)
	s := &guardedClientStream{c: c, e: e, call: call, serverStreams: desc.ServerStreams}
	mask, i, d := e.rule.admit(&s.call, &s.permits)
	if i >= 0 {
		return nil, e.refusal(i, d)
	}
	e.rule.passed.Add(1)
	s.mask = mask
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		c.finish(e, call, mask, &s.permits, err, nil)
		return nil, err
	}
	s.ClientStream = cs
	s.stop = context.AfterFunc(ctx, s.abandon)
	return s, nil
}

// guardedClientStream finishes its call when the stream ends.
type guardedClientStream struct {
	grpc.ClientStream
	c             *Client
	e             *clientEntry
	call          Call
	mask          uint32
	permits       [maxGuards]Permit
	serverStreams bool
	done          atomic.Bool
	stop          func() bool
}

func (s *guardedClientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	switch {
	case err == nil:
		if !s.serverStreams {
			s.end(nil, false) // the one response of a client-streaming call
		}
	case err == io.EOF:
		s.end(nil, false)
	default:
		s.end(err, true)
	}
	return err
}

func (s *guardedClientStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && err != io.EOF { // io.EOF: the status comes from RecvMsg
		s.end(err, false)
	}
	return err
}

func (s *guardedClientStream) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	if err != nil && err != io.EOF {
		s.end(err, false)
	}
	return md, err
}

// abandon finishes a stream whose context ended before the caller saw its
// end.
func (s *guardedClientStream) abandon() {
	s.end(status.FromContextError(s.call.Ctx.Err()).Err(), false)
}

// end finishes the stream's call once; withTrailer says the trailer may
// be read (RecvMsg returned an error).
func (s *guardedClientStream) end(err error, withTrailer bool) {
	if !s.done.CompareAndSwap(false, true) {
		return
	}
	s.stop()
	var md *metadata.MD
	if withTrailer {
		tr := s.ClientStream.Trailer()
		md = &tr
	}
	s.c.finish(s.e, s.call, s.mask, &s.permits, err, md)
}

// clientRefusal is the error of a call a Client refused locally.
type clientRefusal struct {
	st     *status.Status
	msg    string
	cause  error // breaker.ErrOpen, breaker.ErrTooManyCalls, throttle.ErrThrottled, or nil
	reason string
}

func (e *clientRefusal) Error() string              { return e.msg }
func (e *clientRefusal) GRPCStatus() *status.Status { return e.st }
func (e *clientRefusal) LocalRefusal() bool         { return true }
func (e *clientRefusal) Unwrap() error              { return e.cause }
func (e *clientRefusal) Is(target error) bool       { return target == ErrClientRefused }

// refusal returns the error of a call that guard i refused with d.
func (e *clientEntry) refusal(i int, d Decision) error {
	delay := d.RetryAfter > 0 && d.RetryAfter != never
	if !delay {
		if r := e.refusals[i].Load(); r != nil && r.reason == d.Reason {
			return r
		}
	}
	st := status.New(codes.Unavailable, "levee: client "+e.rule.guards[i].Name()+": "+d.Reason+" ("+e.target.name+")")
	if delay {
		if ws, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}); err == nil {
			st = ws
		}
	}
	r := &clientRefusal{st: st, msg: "rpc error: code = " + st.Code().String() + " desc = " + st.Message(), reason: d.Reason}
	switch d.Reason {
	case ReasonBreaker:
		r.cause = breaker.ErrOpen
	case ReasonProbing:
		r.cause = breaker.ErrTooManyCalls
	case ReasonThrottled:
		r.cause = throttle.ErrThrottled
	}
	if !delay {
		e.refusals[i].Store(r)
	}
	return r
}

// entry returns the state of the pair (target, method), creating it on
// the pair's first call.
func (c *Client) entry(target, method string) *clientEntry {
	if t := (*c.targets.Load())[target]; t != nil {
		if e := (*t.methods.Load())[method]; e != nil {
			return e
		}
	}
	return c.newEntry(target, method)
}

// targetOf returns the state of target, creating it (or returning the
// overflow target) on its first call. The limiter callback runs outside
// the lock; a target built by a goroutine that lost the race is dropped.
func (c *Client) targetOf(target string) *clientTarget {
	for {
		c.mu.Lock()
		m := c.targets.Load()
		if t := (*m)[target]; t != nil {
			c.mu.Unlock()
			return t
		}
		full := len(*m) >= c.o.maxTargets
		if full && c.over != nil {
			t := c.over
			c.mu.Unlock()
			return t
		}
		c.mu.Unlock()
		name := target
		if full {
			name = OverflowName
		}
		t := c.newTarget(name)
		c.mu.Lock()
		switch {
		case c.targets.Load() != m:
			// The map changed meanwhile: look again.
		case full:
			if c.over == nil {
				c.over = t
			}
			t = c.over
			c.mu.Unlock()
			return t
		default:
			nm := make(map[string]*clientTarget, len(*m)+1)
			for k, v := range *m {
				nm[k] = v
			}
			nm[target] = t
			c.targets.Store(&nm)
			c.mu.Unlock()
			return t
		}
		c.mu.Unlock()
	}
}

func (c *Client) newTarget(name string) *clientTarget {
	t := &clientTarget{name: name}
	t.hold.epoch = c.epoch
	t.hold.until.Store(noHoldOff)
	t.methods.Store(&map[string]*clientEntry{})
	if c.o.limiter != nil {
		if l := c.o.limiter(name); l != nil {
			t.limit = RateLimit("rate", l)
		}
	}
	return t
}

// newEntry creates the state of the pair (target, method), or returns the
// target's overflow entry when the target has too many methods.
func (c *Client) newEntry(target, method string) *clientEntry {
	t := c.targetOf(target)
	for {
		c.mu.Lock()
		m := t.methods.Load()
		if e := (*m)[method]; e != nil {
			c.mu.Unlock()
			return e
		}
		full := len(*m) >= c.o.maxMethods
		if full && t.overflow != nil {
			e := t.overflow
			c.mu.Unlock()
			return e
		}
		c.mu.Unlock()
		name := method
		if full {
			name = OverflowName
		}
		e := c.newPair(t, name)
		c.mu.Lock()
		switch {
		case t.methods.Load() != m:
		case full:
			if t.overflow == nil {
				t.overflow = e
			}
			e = t.overflow
			c.mu.Unlock()
			return e
		default:
			nm := make(map[string]*clientEntry, len(*m)+1)
			for k, v := range *m {
				nm[k] = v
			}
			nm[method] = e
			t.methods.Store(&nm)
			c.mu.Unlock()
			return e
		}
		c.mu.Unlock()
	}
}

// newPair builds the guards of one pair; the option callbacks run here,
// outside any lock. It panics if WithClientGuards gives more than 4
// guards or a nil one: a configuration error that surfaces on the pair's
// first call.
func (c *Client) newPair(t *clientTarget, method string) *clientEntry {
	e := &clientEntry{target: t}
	guards := make([]Guard, 0, maxGuards)
	guards = append(guards, holdGuard{&t.hold})
	if t.limit != nil {
		guards = append(guards, t.limit)
	}
	if c.o.throttle != nil {
		thr, err := throttle.New(c.o.throttle(t.name, method)...)
		if err != nil {
			panic("grpcguard: WithThrottle: " + err.Error())
		}
		e.thr = thr
		guards = append(guards, &throttleGuard{name: "throttle", t: e.thr, classify: c.o.classify})
	}
	if c.o.breaker != nil {
		bopts := append([]breaker.Option{breaker.WithClassifier(c.o.classify)}, c.o.breaker(t.name, method)...)
		brk, err := breaker.New(bopts...)
		if err != nil {
			panic("grpcguard: WithBreaker: " + err.Error())
		}
		e.brk = brk
		guards = append(guards, &breakerGuard{name: "breaker", b: e.brk})
	}
	if c.o.guards != nil {
		extra := c.o.guards(t.name, method)
		if len(extra) > maxGuards-clientGuardsFixed {
			panic(fmt.Sprintf("grpcguard: WithClientGuards: %d guards for %s %s, at most %d allowed", len(extra), t.name, method, maxGuards-clientGuardsFixed))
		}
		guards = append(guards, extra...)
	}
	r, err := compileRule(Rule{Name: t.name + " " + method, Guards: guards})
	if err != nil {
		panic("grpcguard: WithClientGuards: " + err.Error())
	}
	e.rule = r
	return e
}

// lookup returns the pair's state if it exists; target or method may be
// OverflowName.
func (c *Client) lookup(target, method string) *clientEntry {
	t := (*c.targets.Load())[target]
	c.mu.Lock()
	defer c.mu.Unlock()
	if t == nil && target == OverflowName {
		t = c.over
	}
	if t == nil {
		return nil
	}
	if e := (*t.methods.Load())[method]; e != nil {
		return e
	}
	if method == OverflowName {
		return t.overflow
	}
	return nil
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

// HoldOff returns how long target is still held off after a server
// pushback: 0 when its calls are not being refused for that reason.
func (c *Client) HoldOff(target string) time.Duration {
	t := (*c.targets.Load())[target]
	if t == nil {
		return 0
	}
	return t.hold.left(c.now())
}

// Stats returns the decision counts of every guard of every (target,
// method) pair; Rule is "target method". It allocates; call it at scrape
// time, not per call.
func (c *Client) Stats() []GuardStats {
	c.mu.Lock()
	targets := make([]*clientTarget, 0, len(*c.targets.Load())+1)
	for _, t := range *c.targets.Load() {
		targets = append(targets, t)
	}
	if c.over != nil {
		targets = append(targets, c.over)
	}
	var entries []*clientEntry
	for _, t := range targets {
		for _, e := range *t.methods.Load() {
			entries = append(entries, e)
		}
		if t.overflow != nil {
			entries = append(entries, t.overflow)
		}
	}
	c.mu.Unlock()
	var out []GuardStats
	for _, e := range entries {
		out = append(out, e.rule.stats()...)
	}
	return out
}
