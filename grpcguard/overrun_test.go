package grpcguard

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// A handler that ignores its context and returns a success after the
// call's deadline is no success: its client saw DEADLINE_EXCEEDED, and a
// guard that learned the overrun as a service time (the deadline guard)
// would refuse every later call with a shorter deadline. Before the
// interceptors read the handler's context, the outcome was a success.
func TestHandlerOverrunningItsDeadlineIsNoSuccess(t *testing.T) {
	g := &outcomeGuard{done: make(chan admission.Outcome, 1)}
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{g}}})
	info := &grpc.UnaryServerInfo{FullMethod: "/pkg.Svc/M"}
	late := func(ctx context.Context, _ any) (any, error) {
		<-ctx.Done() // the handler runs past its deadline, then succeeds
		return "ok", nil
	}
	onTime := func(context.Context, any) (any, error) { return "ok", nil }

	for _, tc := range []struct {
		name     string
		give     grpc.UnaryHandler
		want     error
		overload bool
	}{
		{name: "past its deadline", give: late, want: context.DeadlineExceeded, overload: true},
		{name: "within its deadline", give: onTime, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			if _, err := s.UnaryServerInterceptor()(ctx, nil, info, tc.give); err != nil {
				t.Fatalf("interceptor = %v, want the handler's success", err)
			}
			o := <-g.done
			if !errors.Is(o.Err, tc.want) || (tc.want == nil && o.Err != nil) || o.Overload != tc.overload {
				t.Errorf("Outcome = {Err: %v, Overload: %v}, want {Err: %v, Overload: %v}", o.Err, o.Overload, tc.want, tc.overload)
			}
		})
	}
}
