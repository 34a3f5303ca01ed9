package grpcguard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/clock"
)

// ReasonCanceled is the refusal of a call whose caller gave up before its
// handler started.
const ReasonCanceled = "caller gave up before the handler started"

// Option configures a Server. A nil Option is ignored.
type Option func(*serverOptions)

type serverOptions struct {
	exempt    []string
	exemptSet bool

	maxStreams, maxPeerStreams int
	streamsSet                 bool
	streamCode                 decide.Code // WithStreamCode; 0: ResourceExhausted
}

// WithExempt replaces the exempt method patterns (default
// decide.DefaultExempt); WithExempt() with no pattern guards every method,
// health checks included. It is decide.WithExempt for the engine New
// makes; ForEngine rejects it (the engine's exemptions are its own).
func WithExempt(patterns ...string) Option {
	return func(o *serverOptions) { o.exempt, o.exemptSet = patterns, true }
}

// engineOptions are the engine's options among opts.
func engineOptions(opts []Option) []decide.Option {
	var o serverOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if !o.exemptSet {
		return nil
	}
	return []decide.Option{decide.WithExempt(o.exempt...)}
}

// Server guards the calls of a gRPC server by the rules of an engine
// (decide.Engine). It offers the checks
// at two depths:
//
//   - TapHandle runs in the transport, before the stream and its goroutine
//     exist: every guard of the call's rule decides there, and a refused
//     call costs the server no goroutine, no handler and no queueing. The
//     permits it grants (a bulkhead slot) are held until the call ends.
//   - UnaryServerInterceptor and StreamServerInterceptor run at the start of
//     the handler. For a call the tap admitted they run the Rechecker guards
//     (is the deadline still reachable? did the call queue too long?) and
//     finish the call's permits with its outcome; for a call that did not go
//     through the tap they run the whole rule.
//
// ServerOptions installs all of them. A refusal ends the call with the
// rule's code (RESOURCE_EXHAUSTED by default), a message naming the guard,
// a google.rpc.RetryInfo detail, a google.rpc.QuotaFailure detail for a
// per-key refusal and, from the interceptors, the grpc-retry-pushback-ms
// trailer. (grpc-go's tap API can set no trailer: a refusal in the tap
// carries its delay in RetryInfo only.) Every refusal is recorded with
// the engine once (decide.Engine.Refused): counted by guard, reason and
// evidence, and told to its Observer, sampled.
//
// Streams are admitted once, when they open, and hold their permits for
// their life, except a run limit's turn, which a server stream holds for
// a while at most and a stream the client sends on not at all: see
// WithStreamLimits, admission.Call.Stream and runlimit.NewGuard.
//
// Create one with New; the zero value is not usable. A Server is safe for
// concurrent use.
type Server struct {
	engine     *decide.Engine
	clock      clock.Mono // in-package tests set clock.Fake
	streams    *streams
	streamCode decide.Code // of a cap's refusal on a method no rule guards
	tapLeft    leftovers
	pending    pending // the calls the tap admitted whose handler has not started
}

// New compiles rules into an engine (decide.New, with WithExempt's
// patterns) and returns a Server on it. It returns an error naming the
// rule and pattern when a rule has no or too many guards, a nil guard, a
// malformed method pattern, or a pattern that another rule or an
// exemption already takes.
func New(rules []decide.Rule, opts ...Option) (*Server, error) {
	e, err := decide.New(rules, engineOptions(opts)...)
	if err != nil {
		return nil, err
	}
	return newServer(e, opts)
}

// ForEngine returns a Server on e, an engine other front-ends (connect-go,
// net/http) may share: one set of rules, guards and counts for every
// transport of a process. opts are the Server's own (WithStreamLimits,
// WithStreamCode); ForEngine fails on WithExempt, since exemptions are e's.
func ForEngine(e *decide.Engine, opts ...Option) (*Server, error) {
	if e == nil {
		return nil, errors.New("grpcguard: ForEngine: nil engine")
	}
	if engineOptions(opts) != nil {
		return nil, errors.New("grpcguard: ForEngine: WithExempt: the engine's exemptions are its own (decide.WithExempt)")
	}
	return newServer(e, opts)
}

func newServer(e *decide.Engine, opts []Option) (*Server, error) {
	o := serverOptions{maxStreams: DefaultMaxStreams, maxPeerStreams: DefaultMaxStreamsPerPeer}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := validStreamLimits(o); err != nil {
		return nil, err
	}
	if o.streamCode == decide.OK {
		o.streamCode = decide.ResourceExhausted
	}
	return &Server{engine: e, clock: clock.New(), streams: newStreams(o.maxStreams, o.maxPeerStreams), streamCode: o.streamCode}, nil
}

// Engine returns the engine whose rules the Server runs.
func (s *Server) Engine() *decide.Engine { return s.engine }

// Swap replaces the rules and exemptions of the Server's engine, as
// decide.Engine.Swap does, with the exemptions of WithExempt (not given:
// decide.DefaultExempt), in one atomic step. On error it changes nothing.
// The open-stream caps and their code stay as New set them (Swap ignores
// WithStreamLimits and WithStreamCode). See decide.Engine.Swap for what
// calls in flight and decision counts do.
func (s *Server) Swap(rules []decide.Rule, opts ...Option) error {
	return s.engine.Swap(rules, engineOptions(opts)...)
}

// now reads the clock: monotonic only, which costs about half of time.Now.
func (s *Server) now() time.Time { return s.clock.Now() }

// ServerOptions returns the options that install the Server in a
// grpc.Server: the tap handle and both interceptors (chained, so they
// compose with others). grpc-go allows one tap handle per server.
func (s *Server) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InTapHandle(s.TapHandle),
		grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(s.StreamServerInterceptor()),
	}
}

// callState is a call admitted by the tap, carried to the interceptor,
// which finishes it. If the handler never starts (the caller gave up, the
// method is unknown, the server stops), the end of its stream's context
// finishes it instead, found by a sweep of the pending calls (see
// pending).
//
// The states are kept in a pool (states) and used again once their call
// is finished: the state of a cheap call is a good part of what the tap
// would allocate. What the tap returns is a tapCtx, which carries the
// state and its generation; a stale tapCtx (a context kept after its
// call, or a sweep that read a pending slot just before the call
// started) finds a later generation in phase, and leaves the state alone.
type callState struct {
	rule    *decide.Compiled
	call    admission.Call
	permits admission.Permits
	// phase is the call's generation (gen, shifted left by phaseBits) and
	// its phase: phaseAdmitted → phaseRunning | phaseDone; or
	// phaseRefused. Whoever moves it out of phaseAdmitted owns the state
	// (the interceptor, or abandon) and gives it back to the pool.
	phase atomic.Uint64

	// A call the tap refused under sustained overload, to be refused by
	// the interceptor with a pushback trailer (see decide.SustainedAfter).
	// Its state is never given back to the pool.
	refused decide.Refusal
}

const (
	phaseAdmitted = iota
	phaseRunning
	phaseDone
	phaseRefused // refused in the tap; the interceptor answers

	phaseBits = 2
	phaseMask = 1<<phaseBits - 1
)

// states are the callStates not in use.
var states = sync.Pool{New: func() any { return new(callState) }}

// newState returns a callState of rule r, in phaseAdmitted, and its
// generation.
func newState(r *decide.Compiled) (*callState, uint64) {
	st := states.Get().(*callState)
	gen := st.phase.Load() >> phaseBits
	st.rule = r
	return st, gen
}

// free gives st, of generation gen, whose call is finished, back to the
// pool, at the next generation.
func (st *callState) free(gen uint64) {
	// Field by field: a stale tapCtx may read phase meanwhile (see
	// callState). refused is only ever set in states never given back.
	st.rule, st.call, st.permits = nil, admission.Call{}, admission.Permits{}
	st.phase.Store(in(gen+1, phaseAdmitted))
	states.Put(st)
}

// in returns the phase word of phase p in generation gen.
func in(gen uint64, p uint64) uint64 { return gen<<phaseBits | p }

// tapCtx is the context the tap returns for a call it admitted (or
// refused, for the interceptor to answer): the transport's context with
// one more value, itself under stateKey, which saves the tap a
// context.WithValue allocation per call. It holds what may be read of the
// call after it ended (its class, for propagateCriticality).
type tapCtx struct {
	context.Context // the transport's context
	st              *callState
	gen             uint64
	// slot is the call's slot in the Server's pending calls, or -1 when it
	// found none and stop unregisters abandon from context.AfterFunc
	// instead. Both are set after the call is registered, possibly after
	// a sweep or the callback has abandoned it (a stream whose context
	// ended in the tap) and its state went back to the pool, which is why
	// they are here; the handler's goroutine, which starts after the tap
	// returned, reads them (release).
	stop       func() bool
	slot       int32
	class      admission.Criticality
	classifies bool // the rule classifies the call (decide.Compiled.Classifies)
}

type stateKey struct{}

// Value returns the tapCtx for stateKey, and the transport context's
// values otherwise.
func (tc *tapCtx) Value(key any) any {
	if key == (stateKey{}) {
		return tc
	}
	return tc.Context.Value(key)
}

// TapHandle is the tap.ServerInHandle: it decides on every call with the
// guards of its rule before grpc-go creates the stream. Install it with
// both interceptors, as ServerOptions does: the interceptor finishes each
// call the tap admitted, and a call whose handler never starts holds what
// the tap granted until shortly after its stream ends (a few milliseconds
// while calls arrive, at most a tenth of a second when none do).
func (s *Server) TapHandle(ctx context.Context, info *tap.Info) (context.Context, error) {
	r := s.engine.Match(info.FullMethodName)
	if r == nil {
		return ctx, nil
	}
	st, gen := newState(r)
	f := tapFacts(ctx, info, s.streams.kinds.Of(info.FullMethodName))
	now := s.now()
	if s.pending.due(int64(now.Sub(s.clock.Epoch()))) {
		s.pending.sweep() // before the rule admits: what abandoned calls hold is back
	}
	r.Fill(f, now, &st.call)
	if i, d := r.Admit(&st.call, &st.permits); i >= 0 {
		rf := r.Refusal(i, d, st.call.Key)
		sustained := s.engine.NoteRefusal(st.call.Now, d) && s.engine.Retrying(f, st.call.Now)
		if sustained || farDeadline(st.call.Now, st.call.Deadline) {
			// Let the interceptor refuse it: under sustained overload,
			// with a trailer that tells the client not to retry; with a
			// far deadline, so that its stream ends (see leftovers).
			st.call.Ctx = nil
			st.refused = rf
			if sustained {
				st.refused = rf.Sustained()
			}
			st.phase.Store(in(gen, phaseRefused))
			s.record(&st.call, st.refused)
			return &tapCtx{Context: ctx, st: st, gen: gen, slot: -1, class: st.call.Class, classifies: r.Classifies()}, nil
		}
		s.record(&st.call, rf)
		s.tapLeft.note(st.call.Now, st.call.Deadline)
		st.free(gen)
		return nil, refusalStatus(ctx, rf).Err()
	}
	st.call.Ctx = nil // the stream's context replaces the transport's
	tc := &tapCtx{Context: ctx, st: st, gen: gen, class: st.call.Class, classifies: r.Classifies()}
	if tc.slot = s.pending.add(tc); tc.slot < 0 {
		tc.stop = context.AfterFunc(tc, tc.abandon)
	}
	return tc, nil
}

// release takes a call whose handler starts, or that is refused before
// it, out of the pending calls (or unregisters its AfterFunc): its
// stream's end no longer abandons it. The caller owns tc's state.
func (s *Server) release(tc *tapCtx) {
	if tc.slot >= 0 {
		s.pending.remove(tc.slot, tc)
	} else if tc.stop != nil {
		tc.stop()
	}
}

// TapRefusalHorizon is the farthest deadline of a call the tap refuses
// itself. grpc-go keeps a tap-refused stream's deadline timer and context
// until the deadline (see TapLeftovers), so a call the tap would refuse
// whose deadline is farther (a client may send one of years) is let
// through to the interceptor instead, which refuses it with the same
// status and ends its stream: it costs a stream and a goroutine for a
// moment rather than memory until its deadline or its connection's end.
const TapRefusalHorizon = 2 * time.Minute

// farDeadline reports whether deadline is beyond TapRefusalHorizon from
// now; a call without one leaves nothing behind.
func farDeadline(now, deadline time.Time) bool {
	return !deadline.IsZero() && deadline.Sub(now) > TapRefusalHorizon
}

// record tells the engine of the refusal rf of call c, decided at c.Now
// (decide.Engine.Refused): its counts and its Observer. It allocates
// nothing.
func (s *Server) record(c *admission.Call, rf decide.Refusal) { s.engine.RefusedCall(c, rf) }

// abandon finishes a call whose stream ended before its handler started,
// unless its handler started (or its call was abandoned) first.
func (tc *tapCtx) abandon() {
	if st := tc.st; st.phase.CompareAndSwap(in(tc.gen, phaseAdmitted), in(tc.gen, phaseDone)) {
		st.rule.Abandon(&st.call, &st.permits)
		st.free(tc.gen)
	}
}

// start moves a tap-admitted call to its handler: it runs the rule's
// rechecks and reports the refusal, if any, with the call finished, and
// the pushback trailer's value ("" for none). Unless it refuses, the
// handler's goroutine owns tc's state from then on, and gives it back
// with end.
func (s *Server) start(ctx context.Context, tc *tapCtx, kind decide.Kind) (admission.Call, *status.Status, string) {
	st := tc.st
	now := s.now()
	if !st.phase.CompareAndSwap(in(tc.gen, phaseAdmitted), in(tc.gen, phaseRunning)) {
		if st.phase.Load() == in(tc.gen, phaseRefused) {
			// A state refused in the tap is never used again.
			return admission.Call{}, refusalStatus(ctx, st.refused), pushback(st.refused)
		}
		// The stream's context ended first and abandon finished the call.
		// Its stream's context has ended, whatever ctx says: an earlier
		// interceptor may have detached ctx (WithoutCancel) or derived
		// one whose cancellation has not arrived yet.
		err := tc.Context.Err()
		if err == nil {
			err = context.Canceled
		}
		return admission.Call{}, status.FromContextError(err), ""
	}
	s.release(tc)
	c := st.call
	c.Ctx = ctx
	if c.StreamUnknown && kind == decide.Unary {
		s.streams.kinds.Note(c.Method, kind) // its next calls are admitted as unary (stream noted streams)
	}
	c.Stream, c.ClientStream, c.StreamUnknown = kind.Stream(), kind.ClientSends(), false
	c.Queued = now.Sub(c.Now)
	c.Now, c.NowStale = now, false // read now: whatever the tap's guards may have blocked is behind it
	if i, d := st.rule.Start(&c, &st.permits); i >= 0 {
		now = s.now() // decided now: a Starter may have waited before refusing
		c.Now = now
		rf := st.rule.Refusal(i, d, c.Key)
		if s.engine.NoteRefusal(now, d) {
			rf = rf.Sustained()
		}
		s.record(&c, rf)
		st.free(tc.gen)
		return c, refusalStatus(ctx, rf), pushback(rf)
	}
	if c.NowStale {
		c.Now, c.NowStale = s.now(), false // the handler starts after its turn: see outcome
	}
	return c, nil, ""
}

// end finishes a tap-admitted call whose handler ran, and gives its state
// back.
func (s *Server) end(tc *tapCtx, c admission.Call, err error) {
	st := tc.st
	r := st.rule
	r.Finish(&c, &st.permits, s.outcome(r, &c, err))
	st.free(tc.gen)
}

// outcome is the outcome of a call that ran; its duration is measured only
// if a guard of the rule uses it, from the start of its handler: after any
// wait for a turn that a Starter guard imposed, so that what guards learn
// of a method's service time never includes levee's own queueing.
func (s *Server) outcome(r *decide.Compiled, c *admission.Call, err error) admission.Outcome {
	o := admission.Outcome{Err: err}
	if err != nil {
		o.Overload = IsOverload(err)
	}
	if r.Timed() && !c.Stream {
		o.Duration = s.now().Sub(c.Now)
	}
	return o
}

// errPanicked is the outcome of a call whose handler panicked: the
// interceptors finish it as they unwind, so that a recovery interceptor
// outside them leaves no permit behind.
var errPanicked = errors.New("grpcguard: the handler panicked")

// IsOverload reports whether err says that a server was overloaded — it
// ran out of time (DEADLINE_EXCEEDED, context.DeadlineExceeded) or refused
// for lack of capacity (RESOURCE_EXHAUSTED, UNAVAILABLE) — rather than an
// error of the application. Transports set admission.Outcome.Overload
// with it.
func IsOverload(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	return decide.Code(status.Code(err)).Overload()
}

// UnaryServerInterceptor returns the unary interceptor; see Server.
func (s *Server) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return s.unary
}

func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if tc, ok := ctx.Value(stateKey{}).(*tapCtx); ok {
		c, refused, pb := s.start(ctx, tc, decide.Unary)
		if refused != nil {
			setPushback(ctx, nil, pb)
			return nil, refused.Err()
		}
		// Deferred, so that a handler that panics behind a recovery
		// interceptor still gives back what the guards granted.
		err := errPanicked
		defer func() { s.end(tc, c, err) }()
		var resp any
		resp, err = handler(ctx, req)
		return resp, err
	}
	r := s.engine.Match(info.FullMethod)
	if r == nil {
		return handler(ctx, req)
	}
	// enter, inlined by hand: returning the Decision from a helper costs
	// the unary hot path one more copy.
	var c admission.Call
	r.Fill(callFacts(ctx, info.FullMethod, decide.Unary), s.now(), &c)
	var permits admission.Permits
	if i, d := r.Enter(&c, &permits); i >= 0 {
		// No tap refused first: this refusal can carry the trailer that
		// tells a client not to retry, as a tapped call's does at Start.
		c.Now = s.now() // decided now: a guard may have waited before refusing
		rf := s.engine.Refuse(r, i, d, &c, c.Now)
		setPushback(ctx, nil, pushback(rf))
		return nil, refusalStatus(ctx, rf).Err()
	}
	if c.NowStale {
		c.Now, c.NowStale = s.now(), false // the handler starts after its turn: see outcome
	}
	err := errPanicked
	defer func() { r.Finish(&c, &permits, s.outcome(r, &c, err)) }()
	var resp any
	resp, err = handler(ctx, req)
	return resp, err
}

// enter admits a call that did not go through the tap: the whole rule,
// then its Starter guards. It fills c and permits in place (a returned
// Call is copied through memory, which on the admitted path costs more
// than the fields) and returns the index of the refusing guard, or -1.
func (s *Server) enter(ctx context.Context, r *decide.Compiled, method string, kind decide.Kind, c *admission.Call, permits *admission.Permits) (int, admission.Decision) {
	r.Fill(callFacts(ctx, method, kind), s.now(), c)
	i, d := r.Enter(c, permits)
	if i < 0 && c.NowStale {
		c.Now, c.NowStale = s.now(), false // the handler starts after its turn: see outcome
	}
	return i, d
}

// StreamServerInterceptor returns the stream interceptor; see Server.
func (s *Server) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return s.stream
}

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	if srv != nil { // a registered method, not one for grpc.UnknownServiceHandler
		s.streams.kinds.Note(info.FullMethod, streamKind(info))
	}
	tc, tapped := ctx.Value(stateKey{}).(*tapCtx)
	switch {
	case tapped && tc.st.phase.Load() == in(tc.gen, phaseRefused):
		// Refused in the tap, which recorded it: start answers with that
		// refusal and its pushback. It takes no place among the open
		// streams, and a full cap does not refuse it a second time.
	case isHealthStream(info.FullMethod):
		// Neither counted nor capped: see WithStreamLimits.
	default:
		ip, ok := s.streams.enter(ctx)
		if !ok {
			return s.refuseStream(ctx, ss, info.FullMethod, tc, tapped)
		}
		defer s.streams.leave(ip)
	}
	kind := streamKind(info)
	if tapped {
		c, refused, pb := s.start(ctx, tc, kind)
		if refused != nil {
			setPushback(ctx, ss, pb)
			return refused.Err()
		}
		err := errPanicked
		defer func() { s.end(tc, c, err) }()
		err = handler(srv, ss)
		return err
	}
	r := s.engine.Match(info.FullMethod)
	if r == nil {
		return handler(srv, ss)
	}
	var c admission.Call
	var permits admission.Permits
	if i, d := s.enter(ctx, r, info.FullMethod, kind, &c, &permits); i >= 0 {
		c.Now = s.now() // as the unary path's
		rf := s.engine.Refuse(r, i, d, &c, c.Now)
		setPushback(ctx, ss, pushback(rf))
		return refusalStatus(ctx, rf).Err()
	}
	err := errPanicked
	defer func() { r.Finish(&c, &permits, s.outcome(r, &c, err)) }()
	err = handler(srv, ss)
	return err
}

// refuseStream refuses a stream beyond the open-stream caps, with the
// code of its rule (WithStreamCode's when none guards its method), and
// finishes what the tap granted it.
func (s *Server) refuseStream(ctx context.Context, ss grpc.ServerStream, method string, tc *tapCtx, tapped bool) error {
	code := s.streamCode
	if r := s.engine.Match(method); r != nil {
		code = r.Code() // a cap refuses with its rule's code, tap or not
	}
	c := admission.Call{Method: method, Now: s.now(), Class: admission.Critical}
	if tapped {
		c.Class = tc.class
		if st := tc.st; st.phase.CompareAndSwap(in(tc.gen, phaseAdmitted), in(tc.gen, phaseDone)) {
			s.release(tc)
			code, c.Tenant = st.rule.Code(), st.call.Tenant
			st.rule.Abandon(&st.call, &st.permits)
			st.free(tc.gen)
		}
	}
	rf := decide.NewRefusal(code, StreamGuardName, streamRefusal, "")
	s.record(&c, rf)
	setPushback(ctx, ss, pushback(rf))
	return refusalStatus(ctx, rf).Err()
}

// StreamStats returns the open-stream counts.
func (s *Server) StreamStats() StreamStats { return s.streams.stats() }

// Stats returns the decision counts of every guard of every rule of the
// Server's engine (decide.Engine.Stats). It allocates; call it at scrape
// time, not per call.
func (s *Server) Stats() []admission.GuardStats { return s.engine.Stats() }

// RefusalCounts returns the refusals of the Server's engine by guard,
// reason and evidence (decide.Engine.RefusalCounts), for
// levee_refusals_total. It allocates; call it at scrape time.
func (s *Server) RefusalCounts() []decide.RefusalCount { return s.engine.RefusalCounts() }

// Rules returns the rules in force and the exempt method patterns
// (decide.Engine.Rules).
func (s *Server) Rules() (rules []decide.Rule, exempt []string) { return s.engine.Rules() }

// HandlerStarts returns how many handlers started on guarded calls, on
// every front-end of the Server's engine (decide.Engine.Passed).
func (s *Server) HandlerStarts() uint64 { return s.engine.Passed() }
