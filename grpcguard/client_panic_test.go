package grpcguard

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/clock/clocktest"
)

// TestClientPanicBelowGivesBack: an invoker or streamer that panics (an
// interceptor chained after the Client's, a codec), with the panic
// recovered above, still ends the call at every guard that admitted it,
// as skipped: no verdict, and nothing kept (a breaker's half-open probe
// permit, a bulkhead's slot). Before, nothing was finished.
func TestClientPanicBelowGivesBack(t *testing.T) {
	g := &outcomeGuard{done: make(chan admission.Outcome, 1)}
	c := mustClient(t, clocktest.New(time.Now()), WithBreaker(nil), WithThrottle(nil),
		WithClientGuards(func(string, string) []admission.Guard { return []admission.Guard{g} }))
	cc := cliConn(t, "passthrough:///inventory")
	recovered := func(f func()) (p any) {
		defer func() { p = recover() }()
		f()
		return nil
	}
	calls := map[string]func(){
		"unary": func() {
			invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { panic("below") }
			_ = c.UnaryClientInterceptor()(context.Background(), cliMethod, nil, nil, cc, invoker)
		},
		"stream": func() {
			streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
				panic("below")
			}
			_, _ = c.StreamClientInterceptor()(context.Background(), &grpc.StreamDesc{ServerStreams: true}, cc, cliMethod, streamer)
		},
	}
	for name, call := range calls {
		if p := recovered(call); p != "below" {
			t.Fatalf("%s: recovered %v, want the panic passed on", name, p)
		}
		select {
		case o := <-g.done:
			if !o.Skipped {
				t.Errorf("%s: finished with %+v, want skipped", name, o)
			}
		default:
			t.Errorf("%s: the call was never finished", name)
		}
	}
}
