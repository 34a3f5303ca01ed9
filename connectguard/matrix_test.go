package connectguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/guardtest"
)

// clientProtocols are the protocols a connect-go client speaks.
var clientProtocols = []struct {
	name string
	opts []connect.ClientOption
}{
	{"connect", nil},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}},
	{"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}},
}

var streamKinds = []struct {
	name string
	proc string
}{
	{"unary", procUnary},
	{"client_stream", procClient},
	{"server_stream", procServer},
	{"bidi_stream", procBidi},
}

// call makes one call of procedure proc from a connect-go client over hc
// with opts, as tenant "acme", and returns its error.
func call(ctx context.Context, hc connect.HTTPClient, url, proc string, opts ...connect.ClientOption) error {
	c := connect.NewClient[msg, msg](hc, url+proc, opts...)
	const tenant = "X-Tenant-Id"
	switch proc {
	case procUnary:
		req := connect.NewRequest(wrapperspb.String("hi"))
		req.Header().Set(tenant, "acme")
		_, err := c.CallUnary(ctx, req)
		return err
	case procClient:
		s := c.CallClientStream(ctx)
		s.RequestHeader().Set(tenant, "acme")
		_ = s.Send(wrapperspb.String("hi")) // fails once the server has answered; the answer is CloseAndReceive's
		_, err := s.CloseAndReceive()
		return err
	case procServer:
		req := connect.NewRequest(wrapperspb.String("hi"))
		req.Header().Set(tenant, "acme")
		s, err := c.CallServerStream(ctx, req)
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	default:
		s := c.CallBidiStream(ctx)
		s.RequestHeader().Set(tenant, "acme")
		_ = s.Send(wrapperspb.String("hi"))
		_ = s.CloseRequest()
		defer s.CloseResponse()
		for {
			if _, err := s.Receive(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}
}

// refusalCase is a refusal a test forces, and what a client must see.
type refusalCase struct {
	name        string
	code        decide.Code // the rule's
	d           admission.Decision
	wantCode    connect.Code
	wantHTTP    int           // a Connect unary call's status
	wantRetry   time.Duration // RetryInfo; 0: none
	wantAfter   string        // Retry-After; "": none
	wantPush    string        // Grpc-Retry-Pushback-Ms
	wantSubject string        // QuotaFailure; "": none
	wantReason  string        // ErrorInfo
	wantEvid    string        // ErrorInfo's evidence
}

var refusalCases = []refusalCase{
	{
		name: "rate", d: admission.RefuseFor(admission.CauseRateLimited, admission.EvidenceLimit, "rate limit exceeded", 1500*time.Millisecond),
		wantCode: connect.CodeResourceExhausted, wantHTTP: 429, wantRetry: 1500 * time.Millisecond, wantAfter: "2", wantPush: "1500",
		wantReason: "RATE_LIMITED", wantEvid: "limit",
	},
	{
		name: "per key", d: admission.Decision{Refused: true, Reason: "per-key rate limit exceeded", RetryAfter: 300 * time.Millisecond, PerKey: true, Cause: admission.CausePerKeyLimited, Evidence: admission.EvidenceLimit},
		wantCode: connect.CodeResourceExhausted, wantHTTP: 429, wantRetry: 300 * time.Millisecond, wantAfter: "1", wantPush: "300", wantSubject: "acme",
		wantReason: "PER_KEY_LIMITED", wantEvid: "limit",
	},
	{
		name: "unavailable", code: decide.Unavailable, d: admission.Decision{Refused: true, Reason: "cpu overloaded", RetryAfter: 2 * time.Second, Cause: admission.CauseCPUOverloaded, Evidence: admission.EvidenceCPU, Value: 0.97, Threshold: 0.9},
		wantCode: connect.CodeUnavailable, wantHTTP: 503, wantRetry: 2 * time.Second, wantAfter: "2", wantPush: "2000",
		wantReason: "CPU_OVERLOADED", wantEvid: "cpu",
	},
	{
		name: "deadline", d: admission.Decision{Refused: true, Reason: "deadline too short", RetryAfter: admission.Never, DeadlineTooShort: true},
		wantCode: connect.CodeDeadlineExceeded, wantHTTP: 504, wantPush: "-1",
		wantReason: "DEADLINE_TOO_SHORT", wantEvid: "none",
	},
}

// TestRefusalsInEveryProtocol forces refusals in the middleware (before
// the body), in the interceptor (the handler's turn) and in the
// interceptor installed alone, and reads each from a connect-go client in
// the Connect, gRPC and gRPC-Web protocols, on every stream kind: the
// code, the details, the metadata and the raw HTTP status.
func TestRefusalsInEveryProtocol(t *testing.T) {
	grant := admission.Decision{}
	for _, where := range []string{"middleware", "interceptor", "interceptor alone"} {
		for _, rc := range refusalCases {
			t.Run(where+"/"+rc.name, func(t *testing.T) {
				fg := &guardtest.Forced{}
				if where == "interceptor" {
					fg.Set(grant, rc.d)
				} else {
					fg.Set(rc.d, grant)
				}
				g := newGuard(t, rc.code, fg)
				t0 := time.Now()
				g.clock.Fake = func() time.Time { return t0 } // refusals never sustained
				var runs atomic.Int64
				var h http.Handler = echoHandlers(&runs, connect.WithInterceptors(g.Interceptor()))
				if where != "interceptor alone" {
					h = g.Middleware(h)
				}
				url := serveH2C(t, h)
				rec := newRecorder(t)
				for _, p := range clientProtocols {
					for _, k := range streamKinds {
						err := call(context.Background(), rec, url, k.proc, p.opts...)
						checkRefusal(t, p.name+" "+k.name, err, rc)
						wantHTTP := http.StatusOK
						if p.name == "connect" && k.proc == procUnary {
							wantHTTP = rc.wantHTTP
						}
						if got := rec.last(); got != wantHTTP {
							t.Errorf("%s %s: HTTP status %d, want %d", p.name, k.name, got, wantHTTP)
						}
					}
				}
				if n := runs.Load(); n != 0 {
					t.Errorf("%d handlers ran, want none", n)
				}
				admits, starts, finishes := fg.Counts()
				wantStarts := 0
				if where == "interceptor" {
					wantStarts = admits
				}
				// A guard that refuses at admission is not finished; one that
				// refuses at Start is, as skipped.
				if admits != 12 || starts != wantStarts || finishes != wantStarts {
					t.Errorf("guard saw %d admits, %d starts, %d finishes; want 12, %[4]d, %[4]d", admits, starts, finishes, wantStarts)
				}
				// Each refusal recorded with the engine once.
				if c := g.engine.RefusalCounts(); len(c) != 1 || c[0].Guard != "forced" || string(c[0].Reason) != rc.wantReason ||
					c[0].Evidence.String() != rc.wantEvid || c[0].Count != 12 {
					t.Errorf("engine's RefusalCounts() = %+v, want 12 %s refusals by forced on %s", c, rc.wantReason, rc.wantEvid)
				}
			})
		}
	}
}

func checkRefusal(t *testing.T, what string, err error, rc refusalCase) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Errorf("%s: error %v, want a connect error", what, err)
		return
	}
	if ce.Code() != rc.wantCode {
		t.Errorf("%s: code %v, want %v (%v)", what, ce.Code(), rc.wantCode, err)
	}
	var retry time.Duration
	var subject string
	var info *errdetails.ErrorInfo
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			t.Errorf("%s: detail %s: %v", what, d.Type(), derr)
			continue
		}
		switch v := v.(type) {
		case *errdetails.RetryInfo:
			retry = v.GetRetryDelay().AsDuration()
		case *errdetails.QuotaFailure:
			subject = v.GetViolations()[0].GetSubject()
		case *errdetails.ErrorInfo:
			info = v
		}
	}
	if info.GetReason() != rc.wantReason || info.GetDomain() != decide.ErrorDomain ||
		info.GetMetadata()["guard"] != "forced" || info.GetMetadata()["evidence"] != rc.wantEvid {
		t.Errorf("%s: ErrorInfo %v; want reason %s, domain levee, guard forced, evidence %s", what, info, rc.wantReason, rc.wantEvid)
	}
	if retry != rc.wantRetry || subject != rc.wantSubject {
		t.Errorf("%s: RetryInfo %v, QuotaFailure %q; want %v, %q", what, retry, subject, rc.wantRetry, rc.wantSubject)
	}
	if got := ce.Meta().Get("Retry-After"); got != rc.wantAfter {
		t.Errorf("%s: Retry-After %q, want %q", what, got, rc.wantAfter)
	}
	if got := ce.Meta().Get(PushbackHeader); got != rc.wantPush {
		t.Errorf("%s: %s %q, want %q", what, PushbackHeader, got, rc.wantPush)
	}
}

// Admitted calls of every kind and protocol reach their handler, take
// their turn with the stream kind of their method, and are finished once
// with a success.
func TestAdmittedInEveryProtocol(t *testing.T) {
	for _, where := range []string{"middleware", "interceptor alone"} {
		t.Run(where, func(t *testing.T) {
			fg := &guardtest.Forced{}
			g := newGuard(t, 0, fg)
			var runs atomic.Int64
			var h http.Handler = echoHandlers(&runs, connect.WithInterceptors(g.Interceptor()))
			if where == "middleware" {
				h = g.Middleware(h)
			}
			url := serveH2C(t, h)
			rec := newRecorder(t)
			for _, p := range clientProtocols {
				for _, k := range streamKinds {
					if err := call(context.Background(), rec, url, k.proc, p.opts...); err != nil {
						t.Errorf("%s %s: %v", p.name, k.name, err)
					}
				}
			}
			admits, starts, finishes := fg.Counts()
			if runs.Load() != 12 || admits != 12 || finishes != 12 {
				t.Errorf("%d runs, %d admits, %d finishes; want 12 each", runs.Load(), admits, finishes)
			}
			if where == "middleware" && starts != 12 {
				t.Errorf("%d starts, want 12: the interceptor takes each call's turn", starts)
			}
			for i, o := range fg.Outcomes() {
				if o.Err != nil || o.Skipped || o.Overload {
					t.Errorf("finish %d: outcome %+v, want a success", i, o)
				}
			}
			for _, c := range fg.Started() {
				want := c.Method != procUnary
				if c.Stream != want || c.ClientStream != (c.Method == procClient || c.Method == procBidi) || c.Key != "acme" || c.Tenant != "acme" {
					t.Errorf("Start saw %s as stream %v, client stream %v, key %q, tenant %q", c.Method, c.Stream, c.ClientStream, c.Key, c.Tenant)
				}
			}
		})
	}
}

// annotate is a user's interceptor around the Guard's that adds to the
// metadata of every error it sees.
type annotate struct{}

func (annotate) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		var ce *connect.Error
		if errors.As(err, &ce) {
			ce.Meta().Add("X-Annotated", "yes")
			ce.Meta().Add("Retry-After", "60")
		}
		return res, err
	}
}

func (annotate) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (annotate) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Refusals alike share their details, but the error the interceptor
// hands to connect-go is each call's own: an interceptor around the
// Guard's that modifies it changes that call's answer alone.
func TestInterceptorRefusalsAreEachCallsOwn(t *testing.T) {
	rc := refusalCases[0]
	for _, where := range []string{"interceptor", "interceptor alone"} {
		t.Run(where, func(t *testing.T) {
			fg := &guardtest.Forced{}
			if where == "interceptor" {
				fg.Set(admission.Decision{}, rc.d)
			} else {
				fg.Set(rc.d, admission.Decision{})
			}
			g := newGuard(t, rc.code, fg)
			var runs atomic.Int64
			var h http.Handler = echoHandlers(&runs, connect.WithInterceptors(annotate{}, g.Interceptor()))
			if where == "interceptor" {
				h = g.Middleware(h)
			}
			url := serveH2C(t, h)
			for i := range 3 {
				err := call(context.Background(), newRecorder(t), url, procUnary, connect.WithGRPC())
				var ce *connect.Error
				if !errors.As(err, &ce) {
					t.Fatalf("call %d: error %v, want a connect error", i, err)
				}
				if got := ce.Meta().Values("X-Annotated"); len(got) != 1 {
					t.Errorf("call %d: X-Annotated %q, want one value (the error is shared between calls)", i, got)
				}
				if got := ce.Meta().Values("Retry-After"); len(got) != 2 || got[0] != rc.wantAfter {
					t.Errorf("call %d: Retry-After %q, want %q and the annotation's", i, got, rc.wantAfter)
				}
			}
		})
	}
}

type outerKey struct{}

// A handler behind the middleware reads the values of its request's
// context, during the call and after it, from a context it kept
// (context.WithoutCancel): the call's state is no pooled context that a
// later call would reuse.
func TestHandlerReadsItsContext(t *testing.T) {
	g := newGuard(t, 0, guardtest.Pass{})
	kept := make(chan context.Context, 64)
	h := connect.NewUnaryHandler(procUnary, func(ctx context.Context, r *connect.Request[msg]) (*connect.Response[msg], error) {
		if got := ctx.Value(outerKey{}); got != r.Msg.GetValue() {
			t.Errorf("handler's context: value %v, want %q", got, r.Msg.GetValue())
		}
		kept <- context.WithoutCancel(ctx)
		return connect.NewResponse(r.Msg), nil
	}, connect.WithInterceptors(g.Interceptor()))
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.Middleware(h).ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), outerKey{}, r.Header.Get("X-Call"))))
	})
	url := serveH2C(t, outer)
	c := connect.NewClient[msg, msg](newRecorder(t), url+procUnary)
	var ctxs []context.Context
	for i := range 32 {
		v := fmt.Sprint("call-", i)
		req := connect.NewRequest(wrapperspb.String(v))
		req.Header().Set("X-Call", v)
		if _, err := c.CallUnary(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		ctxs = append(ctxs, <-kept)
	}
	for i, ctx := range ctxs { // after every call: a reused state would answer a later call's
		if got, want := ctx.Value(outerKey{}), fmt.Sprint("call-", i); got != want {
			t.Errorf("context kept from call %d: value %v, want %q", i, got, want)
		}
	}
}
