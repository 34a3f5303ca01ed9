package connectguard

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/guardtest"
)

// overrunHandlers returns a unary and a server-stream procedure whose
// handlers ignore their deadline: each waits for its context to end, then
// answers a success, as a handler that sleeps or computes past its
// deadline does.
func overrunHandlers(opts ...connect.HandlerOption) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(procUnary, connect.NewUnaryHandler(procUnary, func(ctx context.Context, _ *connect.Request[msg]) (*connect.Response[msg], error) {
		<-ctx.Done()
		return connect.NewResponse(wrapperspb.String("late")), nil
	}, opts...))
	mux.Handle(procServer, connect.NewServerStreamHandler(procServer, func(ctx context.Context, _ *connect.Request[msg], _ *connect.ServerStream[msg]) error {
		<-ctx.Done()
		return nil
	}, opts...))
	return mux
}

// A handler that returns a success after its call's deadline is not
// learned as a success: its client saw DEADLINE_EXCEEDED. Before, the
// deadline guard learned its overrun as the method's service time, and
// refused every later call of the method with a shorter deadline (the
// Timeouts cases of connectrpc/conformance's server suite, whose handlers
// sleep past the deadline as the suite's reference server does, then got
// DEADLINE_EXCEEDED refusals with an ErrorInfo detail the suite does not
// expect). The calls carry only a timeout header, so the server's own
// deadline ends them, never the client.
func TestHandlerOverrunningItsDeadlineIsNoSuccess(t *testing.T) {
	for _, where := range []string{"middleware", "interceptor"} {
		t.Run(where, func(t *testing.T) {
			dl, err := deadline.New()
			if err != nil {
				t.Fatal(err)
			}
			fg := &guardtest.Forced{}
			e, err := decide.New([]decide.Rule{{Name: "overrun", Guards: []admission.Guard{dl, fg}}})
			if err != nil {
				t.Fatal(err)
			}
			g, err := New(e)
			if err != nil {
				t.Fatal(err)
			}
			var h http.Handler = overrunHandlers(connect.WithInterceptors(g.Interceptor()))
			if where == "middleware" {
				h = g.Middleware(h)
			}
			url := serveH2C(t, h)
			hc := guardtest.H2CTransport(t)

			payload, _ := proto.Marshal(wrapperspb.String("hi"))
			unary, _ := http.NewRequest(http.MethodPost, url+procUnary, bytes.NewReader(payload))
			unary.Header.Set("Content-Type", "application/proto")
			unary.Header.Set(ConnectTimeoutHeader, "20")
			// A Connect streaming request: one enveloped message.
			env := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(payload)))
			stream, _ := http.NewRequest(http.MethodPost, url+procServer, bytes.NewReader(append(env, payload...)))
			stream.Header.Set("Content-Type", "application/connect+proto")
			stream.Header.Set(ConnectTimeoutHeader, "20")
			for _, req := range []*http.Request{unary, stream} {
				res, err := hc.RoundTrip(req)
				if err != nil {
					t.Fatalf("%s: %v", req.URL.Path, err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if !fg.Wait(ctx, func(_, _, finishes int) bool { return finishes == 2 }) {
				t.Fatal("the calls were never finished")
			}
			for i, o := range fg.Outcomes() {
				if !errors.Is(o.Err, context.DeadlineExceeded) || !o.Overload {
					t.Errorf("call %d finished with %+v, want context.DeadlineExceeded, an overload", i, o)
				}
			}
			if st := dl.ServiceTime(procUnary); st != 0 {
				t.Errorf("deadline.Guard.ServiceTime(%s) = %v after a handler overran its deadline, want 0 (nothing learned)", procUnary, st)
			}
		})
	}
}
