package grpcguard

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/levee-go/levee/throttle"
)

// TestDisabledBreakerKeepsTheThrottle: the Client's throttle defers to
// the pair's breaker while the breaker judges the downstream (open,
// half-open), not while an operator disabled it (breaker.StateDisabled:
// it admits everything and records nothing). It used to defer whenever
// the breaker was not closed, so disabling the breaker turned the
// adaptive throttle off too: every call reached a downstream that failed
// them all, however high the throttle's drop probability.
func TestDisabledBreakerKeepsTheThrottle(t *testing.T) {
	c := mustClient(t, nil, WithThrottle(func(string, string) []throttle.Option {
		return []throttle.Option{throttle.WithMinRequests(10)}
	}))
	svc := &cliService{}
	svc.plan(func(int64) bool { return true }, codes.Unavailable, "")
	client, cc := serveCli(t, svc, nil, c.DialOptions()...)
	ctx := context.Background()
	// The first call creates the pair; then the operator disables its breaker.
	_, _ = client.EmptyCall(ctx, &testgrpc.Empty{})
	c.Breaker(cc.Target(), cliEmptyCall).Disable()

	const calls = 200
	throttled := 0
	for range calls {
		_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
		if errors.Is(err, throttle.ErrThrottled) {
			throttled++
		}
	}
	p := c.Throttle(cc.Target(), cliEmptyCall).Probability()
	t.Logf("drop probability %.2f, %d of %d calls throttled, server saw %d", p, throttled, calls, svc.calls.Load())
	if throttled == 0 || p < 0.5 {
		t.Errorf("breaker disabled: the throttle's drop probability is %.2f and it dropped %d of %d calls to a downstream failing every call, want it dropping them", p, throttled, calls)
	}
}
