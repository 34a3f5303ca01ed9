package connectguard

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/guardtest"
)

// forcedGuard is a Guard whose one rule holds one guardtest.Forced.
func forcedGuard(t *testing.T) (*guardtest.Forced, *Guard) {
	t.Helper()
	fg := &guardtest.Forced{}
	g, err := New(guardtest.Engine(t, decide.Rule{Name: "forced", Guards: []admission.Guard{fg}}))
	if err != nil {
		t.Fatal(err)
	}
	return fg, g
}

// TestHandlerOnAnotherGoroutineIsFinishedOnce: a handler between the
// middleware and connect-go's (http.TimeoutHandler) runs the call on a
// goroutine of its own and returns when its time is up, while the
// connect handler still runs. The call is finished once, when the connect
// handler returns, with its own outcome: not also by the middleware as
// "handler panicked" (which gave a run limit back one more turn than it
// took, and raced on the call's phase).
func TestHandlerOnAnotherGoroutineIsFinishedOnce(t *testing.T) {
	fg, g := forcedGuard(t)
	release, returned := make(chan struct{}), make(chan struct{})
	// Outside the guard's interceptor: told once it has finished the call.
	after := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			defer close(returned)
			return next(ctx, req)
		}
	})
	mux := http.NewServeMux()
	mux.Handle(procUnary, connect.NewUnaryHandler(procUnary, func(ctx context.Context, _ *connect.Request[msg]) (*connect.Response[msg], error) {
		<-release
		return connect.NewResponse(wrapperspb.String("late")), nil
	}, connect.WithInterceptors(after, g.Interceptor())))
	url := serveH2C(t, g.Middleware(http.TimeoutHandler(mux, 20*time.Millisecond, "timed out")))
	hc := guardtest.H2CTransport(t)

	payload, _ := proto.Marshal(wrapperspb.String("hi"))
	req, _ := http.NewRequest(http.MethodPost, url+procUnary, bytes.NewReader(payload))
	req.Header.Set("Content-Type", "application/proto")
	resp, err := (&http.Client{Transport: hc}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503 from the TimeoutHandler", resp.StatusCode)
	}
	// The TimeoutHandler has answered; the connect handler still runs.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fg.Wait(ctx, func(admits, starts, _ int) bool { return admits == 1 && starts == 1 })
	if admits, starts, finishes := fg.Counts(); admits != 1 || starts != 1 || finishes != 0 {
		t.Fatalf("while the handler runs: %d admits, %d starts, %d finishes; want 1, 1, 0", admits, starts, finishes)
	}
	close(release)
	select {
	case <-returned:
	case <-ctx.Done():
		t.Fatal("the handler never returned")
	}
	if _, _, finishes := fg.Counts(); finishes != 1 {
		t.Fatalf("%d finishes, want 1 (outcomes %+v)", finishes, fg.Outcomes())
	}
	// Its context's deadline (the TimeoutHandler's) passed before it
	// returned: an overload, as any handler's that overruns it.
	if o := fg.Outcomes()[0]; o.Err != context.DeadlineExceeded || !o.Overload {
		t.Errorf("outcome %+v, want the deadline exceeded, an overload (not %q)", o, errHandlerPanicked)
	}
}

// TestPanickingHandlerIsFinishedOnce: a handler that panics behind the
// middleware is finished once, as panicked (the interceptor finishes it
// as the panic passes; the middleware finds it taken).
func TestPanickingHandlerIsFinishedOnce(t *testing.T) {
	fg, g := forcedGuard(t)
	mux := http.NewServeMux()
	mux.Handle(procUnary, connect.NewUnaryHandler(procUnary, func(context.Context, *connect.Request[msg]) (*connect.Response[msg], error) {
		panic("handler bug")
	}, connect.WithInterceptors(g.Interceptor())))
	unwound := make(chan struct{})
	mw := g.Middleware(mux)
	// Outside the middleware: told once the panic has passed it.
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(unwound)
		mw.ServeHTTP(w, r)
	})
	url := serveH2C(t, outer)
	hc := guardtest.H2CTransport(t)
	payload, _ := proto.Marshal(wrapperspb.String("hi"))
	req, _ := http.NewRequest(http.MethodPost, url+procUnary, bytes.NewReader(payload))
	req.Header.Set("Content-Type", "application/proto")
	if resp, err := (&http.Client{Transport: hc}).Do(req); err == nil {
		resp.Body.Close()
	}
	select {
	case <-unwound:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's panic never passed the middleware")
	}
	if admits, starts, finishes := fg.Counts(); admits != 1 || starts != 1 || finishes != 1 {
		t.Fatalf("%d admits, %d starts, %d finishes; want 1 each", admits, starts, finishes)
	}
	if o := fg.Outcomes()[0]; o.Err != errHandlerPanicked {
		t.Errorf("outcome %+v, want %q", o, errHandlerPanicked)
	}
}
