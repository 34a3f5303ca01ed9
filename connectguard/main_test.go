package connectguard

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/guardtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The procedures of the test service, one per stream kind.
const (
	procUnary  = "/levee.test.v1.Echo/Unary"
	procClient = "/levee.test.v1.Echo/ClientStream"
	procServer = "/levee.test.v1.Echo/ServerStream"
	procBidi   = "/levee.test.v1.Echo/Bidi"
)

type msg = wrapperspb.StringValue

// echoHandlers returns the test service: each procedure answers "ok"
// (after reading what the client sends), and counts its handler runs.
func echoHandlers(runs *atomic.Int64, opts ...connect.HandlerOption) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(procUnary, connect.NewUnaryHandler(procUnary, func(_ context.Context, _ *connect.Request[msg]) (*connect.Response[msg], error) {
		runs.Add(1)
		return connect.NewResponse(wrapperspb.String("ok")), nil
	}, opts...))
	mux.Handle(procClient, connect.NewClientStreamHandler(procClient, func(_ context.Context, s *connect.ClientStream[msg]) (*connect.Response[msg], error) {
		runs.Add(1)
		for s.Receive() {
		}
		return connect.NewResponse(wrapperspb.String("ok")), s.Err()
	}, opts...))
	mux.Handle(procServer, connect.NewServerStreamHandler(procServer, func(_ context.Context, _ *connect.Request[msg], s *connect.ServerStream[msg]) error {
		runs.Add(1)
		return s.Send(wrapperspb.String("ok"))
	}, opts...))
	mux.Handle(procBidi, connect.NewBidiStreamHandler(procBidi, func(_ context.Context, s *connect.BidiStream[msg, msg]) error {
		runs.Add(1)
		for {
			if _, err := s.Receive(); err != nil {
				if errors.Is(err, io.EOF) {
					return s.Send(wrapperspb.String("ok"))
				}
				return err
			}
		}
	}, opts...))
	return mux
}

// serveH2C serves h over HTTP/1.1 and cleartext HTTP/2 until the test
// ends, and returns its base URL.
func serveH2C(tb testing.TB, h http.Handler) string { return guardtest.ServeH2C(tb, h) }

// recorder is an HTTP client over cleartext HTTP/2 that records the HTTP
// status of every response.
type recorder struct {
	tr       *http.Transport
	mu       sync.Mutex
	statuses []int
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{tr: guardtest.H2CTransport(t)}
}

func (r *recorder) Do(req *http.Request) (*http.Response, error) {
	res, err := r.tr.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.statuses = append(r.statuses, res.StatusCode)
		r.mu.Unlock()
	}
	return res, err
}

// last returns the status of the last response, or 0.
func (r *recorder) last() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.statuses) == 0 {
		return 0
	}
	return r.statuses[len(r.statuses)-1]
}

// newGuard returns a Guard with opts on an engine of one rule of g, keyed
// and tenanted by x-tenant-id, with code.
func newGuard(t testing.TB, code decide.Code, g admission.Guard, opts ...Option) *Guard {
	t.Helper()
	e, err := decide.New([]decide.Rule{{
		Name:   "forced",
		Guards: []admission.Guard{g},
		Key:    decide.HeaderKey("x-tenant-id"),
		Tenant: decide.HeaderKey("x-tenant-id"),
		Code:   code,
	}})
	if err != nil {
		t.Fatal(err)
	}
	cg, err := New(e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cg
}
