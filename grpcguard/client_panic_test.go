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

// TestClientCallNotSeenThroughCountsOnce: a call that passed its guards
// and was then not seen through (its invoker or streamer panicked, or its
// context ended before it was sent) is one decided call in Stats, once:
// every guard's Admitted is the number of calls, never more (Chain.Stats
// rules out an overshoot). Before, the Client gave such a call back with
// Chain.Abandon, which is for a call admitted in two steps that never
// started: the call counted as passed and as abandoned, twice.
func TestClientCallNotSeenThroughCountsOnce(t *testing.T) {
	c := mustClient(t, clocktest.New(time.Now()), WithBreaker(nil), WithThrottle(nil),
		WithClientGuards(func(string, string) []admission.Guard { return []admission.Guard{admitEvery{}} }))
	cc := cliConn(t, "passthrough:///inventory")
	panics := func(f func()) {
		defer func() { _ = recover() }()
		f()
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	unary := func(ctx context.Context, invoker grpc.UnaryInvoker) {
		_ = c.UnaryClientInterceptor()(ctx, cliMethod, nil, nil, cc, invoker)
	}
	stream := func(ctx context.Context, streamer grpc.Streamer) {
		_, _ = c.StreamClientInterceptor()(ctx, &grpc.StreamDesc{ServerStreams: true}, cc, cliMethod, streamer)
	}
	invokerPanics := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { panic("below") }
	streamerPanics := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		panic("below")
	}
	calls := []func(){
		func() { panics(func() { unary(context.Background(), invokerPanics) }) },
		func() { panics(func() { stream(context.Background(), streamerPanics) }) },
		func() { unary(done, invokerPanics) },   // unsent: the invoker is not called
		func() { stream(done, streamerPanics) }, // unsent: the streamer is not called
	}
	for _, call := range calls {
		call()
	}
	stats := c.Stats()
	if len(stats) == 0 {
		t.Fatal("Stats() is empty")
	}
	for _, s := range stats {
		if s.Admitted+s.Refused != uint64(len(calls)) {
			t.Errorf("%s %s: Stats() = %d admitted, %d refused of %d calls; want each call counted once", s.Rule, s.Guard, s.Admitted, s.Refused, len(calls))
		}
	}
}

// admitEvery admits every call and holds nothing.
type admitEvery struct{}

func (admitEvery) Name() string                                               { return "every" }
func (admitEvery) Admit(admission.Call) admission.Decision                    { return admission.Decision{} }
func (admitEvery) Finish(admission.Call, admission.Permit, admission.Outcome) {}
