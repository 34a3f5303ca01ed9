package connectguard

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/levee-go/levee/internal/guardtest"
)

// unaryServer is a connect-go unary handler served in-process, to measure
// what the Guard adds to connect-go's own cost per call.
type unaryServer struct {
	h    http.Handler
	req  *http.Request
	body *bytes.Reader
	w    *guardtest.DiscardWriter
}

// newUnaryServer returns the echo Unary handler: bare, with the Guard's
// interceptor, or also behind its middleware.
func newUnaryServer(tb testing.TB, mode string) *unaryServer {
	g := newGuard(tb, 0, guardtest.Pass{})
	var opts []connect.HandlerOption
	if mode != "bare" {
		opts = append(opts, connect.WithInterceptors(g.Interceptor()))
	}
	var h http.Handler = connect.NewUnaryHandler(procUnary, func(_ context.Context, r *connect.Request[msg]) (*connect.Response[msg], error) {
		return connect.NewResponse(r.Msg), nil
	}, opts...)
	if mode == "middleware+interceptor" {
		h = g.Middleware(h)
	}
	payload, _ := proto.Marshal(wrapperspb.String("hi"))
	s := &unaryServer{h: h, body: bytes.NewReader(payload), w: &guardtest.DiscardWriter{H: http.Header{}}}
	s.req = httptest.NewRequest(http.MethodPost, procUnary, io.NopCloser(s.body))
	s.req.Header.Set("Content-Type", "application/proto")
	s.req.Header.Set("X-Tenant-Id", "acme")
	s.req.RemoteAddr = "192.0.2.1:1234"
	return s
}

func (s *unaryServer) call() {
	s.body.Seek(0, io.SeekStart)
	clear(s.w.H)
	s.h.ServeHTTP(s.w, s.req)
}

// The interceptor alone adds no allocation to connect-go's; the middleware
// adds one, its call's state, which is also the context that carries it
// to the interceptor and holds the request that carries that context
// (see callState: the only way a net/http middleware hands a value to
// what it wraps). Before the request was copied into the state, and
// before Middleware's handler was a method (a closure, copied into each
// caller, did not inline WithContext there), it added two.
func TestAdmittedPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts vary under the race detector (sync.Pool drops items); make test runs this without it")
	}
	allocs := map[string]float64{}
	for _, mode := range []string{"bare", "interceptor", "middleware+interceptor"} {
		s := newUnaryServer(t, mode)
		for range 10 {
			s.call() // warm the pools
		}
		if s.w.Status != 0 && s.w.Status != http.StatusOK {
			t.Fatalf("%s: status %d", mode, s.w.Status)
		}
		allocs[mode] = testing.AllocsPerRun(200, s.call)
	}
	if d := allocs["interceptor"] - allocs["bare"]; d != 0 {
		t.Errorf("the interceptor adds %v allocations to connect-go's %v, want 0", d, allocs["bare"])
	}
	if d := allocs["middleware+interceptor"] - allocs["bare"]; d != 1 {
		t.Errorf("middleware and interceptor add %v allocations to connect-go's %v, want 1", d, allocs["bare"])
	}
}

// BenchmarkUnary compares a connect-go unary handler, bare, with the
// Guard's interceptor, and behind its middleware too (a guard that admits
// everything: what the front-end costs, not the guards).
func BenchmarkUnary(b *testing.B) {
	for _, mode := range []string{"bare", "interceptor", "middleware+interceptor"} {
		b.Run(mode, func(b *testing.B) {
			s := newUnaryServer(b, mode)
			b.ReportAllocs()
			for b.Loop() {
				s.call()
			}
		})
	}
}
