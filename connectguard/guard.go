package connectguard

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/clock"
	"github.com/levee-go/levee/internal/httpfacts"
	"github.com/levee-go/levee/internal/methodkind"
	"github.com/levee-go/levee/internal/rpcstatus"
)

// PushbackHeader is the metadata key by which a refusal tells gRPC
// clients with a retry policy (grpc-go, grpcio) how long to wait before a
// retry, in milliseconds, or not to retry (-1) (gRFC A6). A refusal
// carries it in the error's metadata: a gRPC trailer, a gRPC-Web
// trailer, a Connect header or end-of-stream metadata.
const PushbackHeader = "Grpc-Retry-Pushback-Ms"

// Option configures a Guard. A nil Option is ignored.
type Option func(*options)

type options struct {
	handlerOpts []connect.HandlerOption
}

// WithHandlerOptions gives the Middleware's error writer
// (connect.NewErrorWriter) the handler options of the guarded handlers.
// Of those, connect.WithCodec changes what the Middleware writes: its
// codec named "proto" marshals the status of a gRPC or gRPC-Web refusal
// (Grpc-Status-Details-Bin). connect.WithRequireConnectProtocolHeader
// changes how the error writer classifies a request, not the refusal: a
// Connect unary request without the Connect-Protocol-Version header,
// which the handlers answer INVALID_ARGUMENT, is refused in unprefixed
// Connect JSON, as one with it. Default: none.
func WithHandlerOptions(opts ...connect.HandlerOption) Option {
	return func(o *options) { o.handlerOpts = append(o.handlerOpts, opts...) }
}

// Guard protects connect-go handlers with the rules of an engine
// (decide.Engine), the same engine a grpc-go server (grpcguard) and plain
// net/http handlers (httpguard) of the process may share: one run limit,
// one CPU and memory signal, one set of buckets for every transport.
//
// It decides at two depths, as grpcguard does with grpc-go's tap and
// interceptors:
//
//   - Middleware runs in front of the connect-go handlers, before
//     connect-go reads a request's body: every guard of the call's rule
//     decides there (a full queue, a bucket, a deadline that cannot be
//     met, CPU or memory overload), and a refusal costs no body read, no
//     decoding and no handler. It reads the call's deadline from the
//     Connect-Timeout-Ms or Grpc-Timeout header as connect-go does.
//   - Interceptor wraps the handlers: for a call the middleware admitted
//     it takes the call's turn to run (the rule's Starter guards, such as
//     the run limit's) and its rechecks, after the request message is
//     read for a unary call and before the first Receive of a stream, and
//     finishes the call with its outcome (connect.CodeOf). For a call the
//     middleware did not see, it runs the whole rule at once.
//
// Install both; the interceptor alone also protects every call, once
// connect-go has read a unary call's body. A refusal is a connect error
// of the rule's code (RESOURCE_EXHAUSTED or UNAVAILABLE;
// DEADLINE_EXCEEDED for a deadline that cannot be met) with a
// google.rpc.RetryInfo detail, a google.rpc.QuotaFailure detail for a
// per-key refusal, and the Retry-After (whole seconds) and
// Grpc-Retry-Pushback-Ms keys in its metadata, written in each protocol's
// form: Connect unary as HTTP 429, 503 or 504 with a JSON body, Connect
// streaming as an end-of-stream message, gRPC as trailers, gRPC-Web as a
// trailers-only response.
//
// Create one with New; the zero value is not usable. A Guard is safe for
// concurrent use.
type Guard struct {
	engine   *decide.Engine
	clock    clock.Mono // in-package tests set clock.Fake
	errw     *connect.ErrorWriter
	kinds    methodkind.Set // for the middleware, which cannot tell a stream from a request
	refusals rpcstatus.Cache[*refusal]
}

// New returns a Guard on e. It fails if e is nil.
func New(e *decide.Engine, opts ...Option) (*Guard, error) {
	if e == nil {
		return nil, errors.New("connectguard: New: nil engine")
	}
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return &Guard{engine: e, clock: clock.New(), errw: connect.NewErrorWriter(o.handlerOpts...)}, nil
}

// Engine returns the engine whose rules the Guard runs.
func (g *Guard) Engine() *decide.Engine { return g.engine }

// callState is a call the middleware admitted, carried to the
// interceptor in the request's context (it is that context: the
// request's, with one more value, itself under stateKey). It holds the
// request the handler gets too, so that the call costs one allocation:
// a net/http middleware hands a value to the handler it wraps only in
// the request's context, which takes a context and a request of its
// own; neither can be pooled, since a handler may keep its context
// after it returns (context.WithoutCancel, a goroutine), and a pooled
// one would then answer another call's values and cancellation.
type callState struct {
	context.Context

	guard   *Guard
	rule    *decide.Compiled
	call    admission.Call
	permits admission.Permits
	phase   atomic.Uint32
	req     http.Request // r with this context: what the handler gets
}

// The phases of a callState. connect-go calls its handler in ServeHTTP,
// so the middleware and the interceptor usually run on one goroutine; but
// a handler between them (http.TimeoutHandler, say) may run the rest on
// another and return first. So the interceptor takes the call from the
// middleware by compare-and-swap, and from then on finishes it itself,
// panic or not; the middleware abandons only a call nobody took.
const (
	phaseAdmitted uint32 = iota // admitted by the middleware
	phaseRunning                // taken by the interceptor
	phaseDone                   // finished or refused
)

type stateKey struct{}

// Value returns the callState for stateKey, and the request context's
// values otherwise.
func (st *callState) Value(key any) any {
	if key == (stateKey{}) {
		return st
	}
	return st.Context.Value(key)
}

// stateOf returns the call g's middleware admitted in ctx, or nil.
func (g *Guard) stateOf(ctx context.Context) *callState {
	st, ok := ctx.Value(stateKey{}).(*callState)
	if !ok || st.guard != g || st.phase.Load() != phaseAdmitted {
		return nil
	}
	return st
}

// errHandlerPanicked is the outcome of a call whose handler panicked.
var errHandlerPanicked = errors.New("connectguard: handler panicked")

// Middleware returns next behind the Guard's admission: see Guard. A
// request for a method no rule governs (exempt, or no default rule), or
// whose timeout header is malformed (connect-go answers it
// INVALID_ARGUMENT before it reads the body), goes to next as it is.
func (g *Guard) Middleware(next http.Handler) http.Handler {
	return &middleware{g: g, next: next}
}

// middleware is Guard.Middleware's handler: a method, not a closure,
// which the compiler would copy into each caller of Middleware, where
// WithContext is not inlined and its copy of the request escapes.
type middleware struct {
	g    *Guard
	next http.Handler
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g, next := m.g, m.next
	method := r.URL.Path
	rule := g.engine.Match(method)
	if rule == nil {
		next.ServeHTTP(w, r)
		return
	}
	now := g.clock.Now()
	deadline, ok := requestDeadline(r, now)
	if !ok {
		next.ServeHTTP(w, r)
		return
	}
	f := decide.Facts{Ctx: r.Context(), Method: method, Deadline: deadline, Kind: g.kinds.Of(method), Lookup: httpfacts.Of(r)}
	var call admission.Call
	var permits admission.Permits
	rule.Fill(f, now, &call)
	if i, d := rule.Admit(&call, &permits); i >= 0 {
		rf := g.engine.Refuse(rule, i, d, &call, now)
		rpcstatus.AnswerBeforeBody(w, r)
		_ = g.errw.Write(w, r, g.refusals.Get(rf, newRefusal).err)
		return
	}
	call.Ctx = nil // the handler's context replaces the request's
	st := &callState{Context: r.Context(), guard: g, rule: rule, call: call, permits: permits}
	defer g.leave(st)
	// WithContext is inlined and its copy does not escape: copied
	// into st, the request costs no allocation of its own
	// (TestAdmittedPathAllocations).
	st.req = *r.WithContext(st)
	next.ServeHTTP(w, &st.req)
}

// leave abandons a call the middleware admitted that the interceptor
// did not take: connect-go refused it before its handler (an unknown
// procedure, a body it could not read or decode, a client that left), or
// a handler between them returned without calling on.
func (g *Guard) leave(st *callState) {
	if st.phase.CompareAndSwap(phaseAdmitted, phaseDone) {
		st.rule.Abandon(&st.call, &st.permits)
	}
}

// requestDeadline returns the deadline of r's call, seen at now: its
// protocol's timeout header (Grpc-Timeout for gRPC and gRPC-Web,
// Connect-Timeout-Ms otherwise) read as connect-go reads it, or the
// request context's deadline when that is sooner; the zero Time for
// none; false when the header is malformed.
func requestDeadline(r *http.Request, now time.Time) (time.Time, bool) {
	var d time.Duration
	var err error
	if protocolOf(headerValue(r.Header, "Content-Type")) == protoConnect {
		d, err = parseConnectTimeout(headerValue(r.Header, ConnectTimeoutHeader))
	} else {
		d, err = parseGRPCTimeout(headerValue(r.Header, GRPCTimeoutHeader))
	}
	ctxDeadline, hasCtx := r.Context().Deadline()
	switch {
	case errors.Is(err, errBadTimeout):
		return time.Time{}, false
	case err != nil: // no timeout
		return ctxDeadline, true
	}
	deadline := now.Add(d)
	if hasCtx && ctxDeadline.Before(deadline) {
		deadline = ctxDeadline
	}
	return deadline, true
}

// headerValue is h.Get(key) for a canonical key, without canonicalising.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// refusal is a refusal as connect-go writes it in every protocol: the
// code, the message, the details and, in the metadata, the Retry-After
// (not for a deadline: retrying with the same deadline is futile) and
// pushback values. It is built once for refusals alike (Guard.refusals)
// and never modified.
type refusal struct {
	code       connect.Code
	msg        error
	details    []*connect.ErrorDetail // immutable once built: errors share them
	retryAfter string
	pushback   string
	// err is the refusal as one error, which only the middleware's
	// error writer reads: an error handed to connect-go is newError's,
	// which an interceptor around the Guard's may modify.
	err *connect.Error
}

func newRefusal(rf decide.Refusal) *refusal {
	r := &refusal{code: connect.Code(rf.Code), msg: errors.New(rpcstatus.Message(rf)), pushback: rpcstatus.Pushback(rf)}
	for _, d := range rpcstatus.Details(rf) {
		if ed, e := connect.NewErrorDetail(d); e == nil {
			r.details = append(r.details, ed)
		}
	}
	if rf.Code != decide.DeadlineExceeded {
		r.retryAfter = rpcstatus.RetryAfter(rf.RetryAfter)
	}
	r.err = r.newError()
	return r
}

// newError returns the refusal as a connect error of its own.
func (r *refusal) newError() *connect.Error {
	err := connect.NewError(r.code, r.msg)
	for _, d := range r.details {
		err.AddDetail(d)
	}
	if r.retryAfter != "" {
		err.Meta()["Retry-After"] = []string{r.retryAfter}
	}
	if r.pushback != "" {
		err.Meta()[PushbackHeader] = []string{r.pushback}
	}
	return err
}

// refusalError returns the connect error of a refusal, for connect-go to
// write: an error of its own, with the details of refusals alike.
func (g *Guard) refusalError(rf decide.Refusal) *connect.Error {
	return g.refusals.Get(rf, newRefusal).newError()
}

// Interceptor returns the Guard's connect-go interceptor: install it on
// the guarded handlers (connect.WithInterceptors), with Middleware in
// front of them. On a client it does nothing.
func (g *Guard) Interceptor() connect.Interceptor { return interceptor{g} }

type interceptor struct{ g *Guard }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	g := i.g
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if spec.IsClient {
			return next(ctx, req)
		}
		if st := g.take(ctx); st != nil {
			c, err := g.start(ctx, st, decide.Unary)
			if err != nil {
				return nil, err
			}
			err = errHandlerPanicked
			defer func() { g.end(ctx, st, &c, err) }()
			var res connect.AnyResponse
			res, err = next(ctx, req)
			return res, err
		}
		rule := g.engine.Match(spec.Procedure)
		if rule == nil {
			return next(ctx, req)
		}
		f := decide.Facts{Ctx: ctx, Method: spec.Procedure, Lookup: unaryLookup(req.Header())}
		f.Deadline, _ = ctx.Deadline()
		var c admission.Call
		var permits admission.Permits
		if err := g.enter(rule, f, &c, &permits); err != nil {
			return nil, err
		}
		ok := false
		defer func() {
			if !ok {
				rule.Finish(&c, &permits, admission.Outcome{Err: errHandlerPanicked})
			}
		}()
		res, err := next(ctx, req)
		ok = true
		rule.Finish(&c, &permits, g.outcome(ctx, rule, &c, err))
		return res, err
	}
}

func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	g := i.g
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		spec := conn.Spec()
		kind := kindOf(spec.StreamType)
		g.kinds.Note(spec.Procedure, kind)
		if st := g.take(ctx); st != nil {
			c, err := g.start(ctx, st, kind)
			if err != nil {
				return err
			}
			err = errHandlerPanicked
			defer func() { g.end(ctx, st, &c, err) }()
			err = next(ctx, conn)
			return err
		}
		rule := g.engine.Match(spec.Procedure)
		if rule == nil {
			return next(ctx, conn)
		}
		f := decide.Facts{Ctx: ctx, Method: spec.Procedure, Kind: kind, Lookup: &streamLookup{conn: conn}}
		f.Deadline, _ = ctx.Deadline()
		var c admission.Call
		var permits admission.Permits
		if err := g.enter(rule, f, &c, &permits); err != nil {
			return err
		}
		ok := false
		defer func() {
			if !ok {
				rule.Finish(&c, &permits, admission.Outcome{Err: errHandlerPanicked})
			}
		}()
		err := next(ctx, conn)
		ok = true
		rule.Finish(&c, &permits, g.outcome(ctx, rule, &c, err))
		return err
	}
}

// take takes the call g's middleware admitted in ctx from it, if there is
// one that the middleware has not abandoned: the interceptor finishes it
// from then on.
func (g *Guard) take(ctx context.Context) *callState {
	if st := g.stateOf(ctx); st != nil && st.phase.CompareAndSwap(phaseAdmitted, phaseRunning) {
		return st
	}
	return nil
}

// start moves a call the interceptor took to its handler: the rule's
// rechecks and Starter guards (its turn to run). It returns the call as
// the handler runs it, or the refusal, with the call finished.
func (g *Guard) start(ctx context.Context, st *callState, kind decide.Kind) (admission.Call, error) {
	c := st.call
	c.Ctx = ctx
	if c.StreamUnknown {
		g.kinds.Note(c.Method, kind) // the procedure's next calls are admitted as kind
	}
	c.Stream, c.ClientStream, c.StreamUnknown = kind.Stream(), kind.ClientSends(), false
	now := g.clock.Now()
	c.Queued = now.Sub(c.Now)
	c.Now, c.NowStale = now, false // read now: whatever the middleware's guards may have blocked is behind it
	if i, d := st.rule.Start(&c, &st.permits); i >= 0 {
		st.phase.Store(phaseDone)
		now = g.clock.Now() // decided now: a Starter may have waited before refusing
		c.Now = now
		return c, g.refusalError(g.engine.Refuse(st.rule, i, d, &c, now))
	}
	if c.NowStale {
		c.Now, c.NowStale = g.clock.Now(), false // the handler starts after its turn: see outcome
	}
	return c, nil
}

// end finishes a call the interceptor took and whose handler ran (or
// panicked: errHandlerPanicked).
func (g *Guard) end(ctx context.Context, st *callState, c *admission.Call, err error) {
	st.phase.Store(phaseDone)
	st.rule.Finish(c, &st.permits, g.outcome(ctx, st.rule, c, err))
}

// enter admits a call the middleware did not see, with the whole rule.
func (g *Guard) enter(rule *decide.Compiled, f decide.Facts, c *admission.Call, permits *admission.Permits) error {
	now := g.clock.Now()
	rule.Fill(f, now, c)
	if i, d := rule.Enter(c, permits); i >= 0 {
		now = g.clock.Now() // decided now: a guard may have waited before refusing
		c.Now = now
		return g.refusalError(g.engine.Refuse(rule, i, d, c, now))
	}
	if c.NowStale {
		c.Now, c.NowStale = g.clock.Now(), false // the handler starts after its turn: see outcome
	}
	return nil
}

// outcome is the outcome of a call that ran in ctx, its handler's
// context: context.DeadlineExceeded, an overload, when the handler
// returned at or after the call's deadline (its client saw
// DEADLINE_EXCEEDED, whatever the handler returned); otherwise the
// handler's error, an overload when its code says the server ran out of
// time or capacity. Its duration is measured from the start of its
// handler (after its turn), only when a guard of the rule reads it and
// the call is not a stream.
//
// A handler that ignores its context and returns a success after its
// deadline must not be learned as a success: the deadline guard would
// take its overrun for the method's service time and refuse every later
// call with a shorter deadline, those the handler serves fast too.
func (g *Guard) outcome(ctx context.Context, r *decide.Compiled, c *admission.Call, err error) admission.Outcome {
	o := admission.Outcome{Err: err}
	var now time.Time
	if ctx.Err() != nil { // its deadline passed, or its client left
		now = g.clock.Now()
		if d, ok := ctx.Deadline(); ok && !now.Before(d) {
			o.Err = context.DeadlineExceeded
		}
	}
	if o.Err != nil {
		o.Overload = isOverload(o.Err)
	}
	if r.Timed() && !c.Stream {
		if now.IsZero() {
			now = g.clock.Now()
		}
		o.Duration = now.Sub(c.Now)
	}
	return o
}

// isOverload reports whether err says the server was overloaded: it ran
// out of time or refused for lack of capacity, as opposed to an error of
// the application.
func isOverload(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	return decide.Code(connect.CodeOf(err)).Overload()
}

// kindOf is the stream kind of a connect-go stream type.
func kindOf(t connect.StreamType) decide.Kind {
	switch t {
	case connect.StreamTypeClient:
		return decide.ClientStream
	case connect.StreamTypeServer:
		return decide.ServerStream
	case connect.StreamTypeBidi:
		return decide.BidiStream
	}
	return decide.Unary
}

// unaryLookup reads the facts of a unary call in the interceptor: its
// headers, and its peer from connect-go's call info (a TLS identity is
// not to be had there: Middleware reads it).
type unaryLookup http.Header

func (l unaryLookup) Header(_ context.Context, name string) (string, bool) {
	return httpfacts.Header(http.Header(l), name)
}

func (unaryLookup) Peer(ctx context.Context) net.Addr {
	ci, ok := connect.CallInfoForHandlerContext(ctx)
	if !ok {
		return nil
	}
	a := ci.Peer().Addr
	if a == "" {
		return nil
	}
	return httpfacts.NewAddr(&a)
}

func (unaryLookup) VerifiedLeaf(context.Context) *x509.Certificate { return nil }

// streamLookup reads the facts of a stream in the interceptor, from its
// connection.
type streamLookup struct{ conn connect.StreamingHandlerConn }

func (l *streamLookup) Header(_ context.Context, name string) (string, bool) {
	return httpfacts.Header(l.conn.RequestHeader(), name)
}

func (l *streamLookup) Peer(context.Context) net.Addr {
	a := l.conn.Peer().Addr
	if a == "" {
		return nil
	}
	return httpfacts.NewAddr(&a)
}

func (*streamLookup) VerifiedLeaf(context.Context) *x509.Certificate { return nil }
