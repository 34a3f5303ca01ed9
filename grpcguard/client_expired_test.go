package grpcguard

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/throttle"
)

// TestExpiredCallsAreNotTheBackendsFailures: a call whose context's
// deadline has already passed is failed by grpc-go itself with
// DEADLINE_EXCEEDED before anything is sent. The backend never saw it:
// the Client must not count it in the pair's breaker or throttle. It
// used to count it as the backend's failure (ClassifyError:
// DEADLINE_EXCEEDED is Failure), so a caller whose upstream deadlines
// had run out opened the breaker, and raised the throttle's drop
// probability, against a healthy backend. Unary calls and streams.
func TestExpiredCallsAreNotTheBackendsFailures(t *testing.T) {
	const window = 10
	expired := func(t *testing.T, opts ...ClientOption) (*Client, string) {
		c := mustClient(t, nil, opts...)
		svc := &cliService{} // healthy: answers every call
		client, cc := serveCli(t, svc, nil, c.DialOptions()...)
		// Warm the connection up with one good call.
		if _, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
			t.Fatalf("first call = %v", err)
		}
		for range 2 * window {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
			_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
			if status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("unary call with an expired deadline: %v, want DEADLINE_EXCEEDED", err)
			}
			_, err = client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
			if status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("stream with an expired deadline: %v, want DEADLINE_EXCEEDED", err)
			}
			cancel()
		}
		if n, m := svc.calls.Load(), svc.streams.Load(); n != 1 || m != 0 {
			t.Fatalf("server saw %d calls and %d streams, want 1 and 0: the expired ones must not have been sent", n, m)
		}
		return c, cc.Target()
	}
	t.Run("breaker", func(t *testing.T) {
		c, target := expired(t, WithThrottle(nil), WithBreaker(func(string, string) []breaker.Option {
			return []breaker.Option{breaker.WithCountWindow(window), breaker.WithMinimumCalls(window), breaker.WithOpenProbes(0)}
		}))
		for _, m := range []string{cliEmptyCall, cliStreamingOutput} {
			s := c.Breaker(target, m).Snapshot()
			if s.State != breaker.StateClosed || s.Failures != 0 {
				t.Errorf("%s: breaker after calls that never left the process: state %v, %d failures; want closed with no failure (the backend never saw them)", m, s.State, s.Failures)
			}
		}
	})
	t.Run("throttle", func(t *testing.T) {
		c, target := expired(t, WithBreaker(nil), WithThrottle(func(string, string) []throttle.Option {
			return []throttle.Option{throttle.WithMinRequests(0)}
		}))
		for _, m := range []string{cliEmptyCall, cliStreamingOutput} {
			if p := c.Throttle(target, m).Probability(); p > 0 {
				t.Errorf("%s: throttle drop probability %.2f after calls that never left the process, want 0", m, p)
			}
		}
	})
}
