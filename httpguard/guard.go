package httpguard

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/clock"
	"github.com/levee-go/levee/internal/httpfacts"
	"github.com/levee-go/levee/internal/rpcstatus"
)

// Option configures a Guard. A nil Option is ignored.
type Option func(*options)

type options struct {
	flow func(*http.Request) string
}

// WithFlow names the flow of each request (the method its rule is found
// by, and the flow whose service time and share of the run limit it
// counts in) with f instead of the route pattern. f runs on every
// request and must be safe for concurrent use; it should return one of
// a few names (routes, not URLs: the engine learns each flow apart up to
// a bound), in the form "/pkg.Service/Method" for a rule or a policy to
// name it. Default: the pattern of the http.ServeMux route
// (http.Request.Pattern, "POST /v1/items/{id}"), or UnroutedFlow when
// the request has none.
func WithFlow(f func(r *http.Request) string) Option {
	return func(o *options) { o.flow = f }
}

// UnroutedFlow is the flow of a request that has no route pattern (the
// Guard wraps a handler that is not a ServeMux route) and no WithFlow.
const UnroutedFlow = "unrouted"

// Guard protects net/http handlers with the rules of an engine
// (decide.Engine), the same engine a grpc-go server (grpcguard) and
// connect-go handlers (connectguard) of the process may share: one run
// limit, one CPU and memory signal, one set of buckets for every
// transport.
//
// Its Middleware decides on each request before the handler runs, and
// so before the handler reads the body: a refused upload costs no body
// bytes (with Expect: 100-continue, net/http sends no 100 Continue, and a
// client that waits for it sends nothing). The request's flow is its
// route pattern (see WithFlow); its deadline, its context's; its key,
// tenant and class come from its headers, its peer (RemoteAddr) and its
// verified client certificate, with the trust model of the rule's
// decide.Criticality. A refusal is written by WriteRefusal. A handler
// that answers 429, 503 or 504, or whose context's deadline passed,
// counts as an overload for the guards that learn from outcomes; any
// other 4xx or 5xx as an error of the application.
//
// Create one with New; the zero value is not usable. A Guard is safe for
// concurrent use.
type Guard struct {
	engine *decide.Engine
	clock  clock.Mono // in-package tests set clock.Fake
	flow   func(*http.Request) string
}

// New returns a Guard on e. It fails if e is nil.
func New(e *decide.Engine, opts ...Option) (*Guard, error) {
	if e == nil {
		return nil, errors.New("httpguard: New: nil engine")
	}
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return &Guard{engine: e, clock: clock.New(), flow: o.flow}, nil
}

// Engine returns the engine whose rules the Guard runs.
func (g *Guard) Engine() *decide.Engine { return g.engine }

func (g *Guard) flowOf(r *http.Request) string {
	if g.flow != nil {
		return g.flow(r)
	}
	if r.Pattern != "" {
		return r.Pattern
	}
	return UnroutedFlow
}

// The outcomes of a handler that answered an error, by kind: sentinel
// values, so that finishing a call allocates nothing.
var (
	errOverloadStatus    = errors.New("httpguard: the handler answered an overload status")
	errApplicationStatus = errors.New("httpguard: the handler answered an error status")
	errHandlerPanicked   = errors.New("httpguard: the handler panicked")
)

// Middleware returns next behind the Guard: see Guard. Install it on each
// route (mux.Handle(pattern, g.Middleware(h))), so that the request's
// route pattern names its flow, or give WithFlow. A request whose flow no
// rule governs (exempt, or no default rule) goes to next as it is.
//
// A call is finished when next returns: install the middleware inside a
// handler that runs the rest of the request on another goroutine and
// returns first (http.TimeoutHandler(g.Middleware(h), d, msg), not
// g.Middleware(http.TimeoutHandler(h, d, msg)), which gives a turn or a
// slot back while h still runs), and know that a handler that hijacks
// the connection and returns holds nothing after it returns.
//
// A request is admitted and started in one step (admission.Chain.Enter):
// with no wait between an earlier admission and its handler, no guard's
// Recheck (admission.Rechecker) is called, and a queuedelay guard refuses
// no request. docs/http.md says more.
func (g *Guard) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		flow := g.flowOf(r)
		rule := g.engine.Match(flow)
		if rule == nil {
			next.ServeHTTP(w, r)
			return
		}
		now := g.clock.Now()
		f := decide.Facts{Ctx: r.Context(), Method: flow, Lookup: httpfacts.Of(r)}
		f.Deadline, _ = r.Context().Deadline()
		var c admission.Call
		var permits admission.Permits
		rule.Fill(f, now, &c)
		if i, d := rule.Enter(&c, &permits); i >= 0 {
			rpcstatus.AnswerBeforeBody(w, r)
			now = g.clock.Now() // decided now: a guard may have waited before refusing
			c.Now = now
			WriteRefusal(w, g.engine.Refuse(rule, i, d, &c, now))
			return
		}
		if c.NowStale {
			c.Now, c.NowStale = g.clock.Now(), false // the handler starts after its turn: see outcome
		}
		rw := wrapWriter(w)
		finished := false
		defer func() {
			if !finished {
				rule.Finish(&c, &permits, admission.Outcome{Err: errHandlerPanicked})
			}
		}()
		next.ServeHTTP(rw, r)
		finished = true
		rule.Finish(&c, &permits, g.outcome(rule, &c, r.Context(), rw))
		rw.release()
	})
}

// outcome is the outcome of a request whose handler ran, from the status
// it answered and its context; its duration, measured from the start of
// the handler (after its turn), only when a guard of the rule reads it and
// the handler did not stream (flush or hijack), whose lifetime is not a
// service time.
func (g *Guard) outcome(r *decide.Compiled, c *admission.Call, ctx context.Context, rw *responseWriter) admission.Outcome {
	var o admission.Outcome
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		o.Err, o.Overload = context.DeadlineExceeded, true
	case OverloadStatus(rw.status):
		o.Err, o.Overload = errOverloadStatus, true
	case rw.status >= 400:
		o.Err = errApplicationStatus
	}
	if r.Timed() && !rw.streamed {
		o.Duration = g.clock.Now().Sub(c.Now)
	}
	return o
}

// OverloadStatus reports whether an HTTP status says the server was
// overloaded: the status of an overload code (decide.Code.Overload,
// decide.Code.HTTPStatus), 429 Too Many Requests, 503 Service
// Unavailable or 504 Gateway Timeout.
func OverloadStatus(code int) bool {
	return code == decide.ResourceExhausted.HTTPStatus() || code == decide.Unavailable.HTTPStatus() ||
		code == decide.DeadlineExceeded.HTTPStatus()
}

// WriteRefusal writes a refusal as an HTTP response: the status of its
// code (decide.Code.HTTPStatus: 429 for RESOURCE_EXHAUSTED, 503 for
// UNAVAILABLE, 504 for a deadline that cannot be met), Retry-After in
// whole seconds rounded up, at least 1 (none for a deadline, nor when no
// wait helps; HTTP has no "do not retry", so a refusal that tells gRPC
// clients not to retry keeps it), and a google.rpc.Status in JSON
// (protojson) carrying the same details as on gRPC: RetryInfo, and
// QuotaFailure for a per-key refusal. Nothing of the request is read.
// The Guard also lets the refusal of an HTTP/1.x request go out before
// the request's body has arrived (http.ResponseController's
// EnableFullDuplex): a handler of its own that refuses with WriteRefusal
// does the same, or net/http waits for up to 256 KiB of an unread body
// first.
func WriteRefusal(w http.ResponseWriter, rf decide.Refusal) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if rf.Code != decide.DeadlineExceeded {
		if v := rpcstatus.RetryAfter(rf.RetryAfter); v != "" {
			h.Set(RetryAfterHeader, v)
		}
	}
	body := bodies.Get(rf, statusJSON)
	w.WriteHeader(rf.Code.HTTPStatus())
	if body != nil {
		_, _ = w.Write(body)
	}
}

// bodies holds the JSON bodies of refusals alike: marshalling one by
// reflection costs more than the rest of a refusal.
var bodies rpcstatus.Cache[[]byte]

// statusJSON returns the google.rpc.Status of a refusal in JSON, nil if
// it does not marshal (it does: its details are well-formed messages).
func statusJSON(rf decide.Refusal) []byte {
	body, err := protojson.Marshal(rpcstatus.Status(rf))
	if err != nil {
		return nil
	}
	return body
}
