package grpcguard

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/clock/clocktest"
)

// outcomeGuard admits every call and hands each finished call's outcome to
// its channel.
type outcomeGuard struct{ done chan admission.Outcome }

func (g *outcomeGuard) Name() string                            { return "outcome" }
func (g *outcomeGuard) Admit(admission.Call) admission.Decision { return admission.Decision{} }
func (g *outcomeGuard) Finish(_ admission.Call, _ admission.Permit, o admission.Outcome) {
	g.done <- o
}

// A stream whose context has ended by the time the streamer returns (a
// deadline that runs out while the stream opens, as in grpc-go's interop
// case timeout_on_sleeping_server) is finished by context.AfterFunc's
// callback at once, on another goroutine, while the interceptor is still
// returning. The callback must not read anything the interceptor writes
// after registering it: under -race this test caught the stream's stop
// function being written after the callback that calls it had started
// (or, without -race, a nil stop function called).
func TestClientStreamContextEndedWhileOpening(t *testing.T) {
	g := &outcomeGuard{done: make(chan admission.Outcome, 1)}
	c := mustClient(t, clocktest.New(time.Now()), WithBreaker(nil), WithThrottle(nil),
		WithClientGuards(func(string, string) []admission.Guard { return []admission.Guard{g} }))
	cc := cliConn(t, "passthrough:///inventory")
	ctx, cancel := context.WithCancel(context.Background())
	streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		cancel() // the stream is open, and its context ends before the interceptor returns
		return fakeClientStream{}, nil
	}
	cs, err := c.StreamClientInterceptor()(ctx, &grpc.StreamDesc{ServerStreams: true}, cc, cliMethod, streamer)
	if err != nil || cs == nil {
		t.Fatalf("StreamClientInterceptor()(...) = %v, %v; want the stream", cs, err)
	}
	select {
	case o := <-g.done:
		if status.Code(o.Err) != codes.Canceled {
			t.Errorf("abandoned stream finished with %v, want CANCELED", o.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned stream was never finished")
	}
	// The stream's own end, after the abandon, finishes nothing again.
	if err := cs.RecvMsg(nil); status.Code(err) != codes.Canceled {
		t.Fatalf("RecvMsg() = %v, want CANCELED", err)
	}
	select {
	case o := <-g.done:
		t.Fatalf("stream finished twice, the second time with %+v", o)
	default:
	}
}

// fakeClientStream is a stream whose context has been canceled.
type fakeClientStream struct{ grpc.ClientStream }

func (fakeClientStream) RecvMsg(any) error { return status.Error(codes.Canceled, "context canceled") }
