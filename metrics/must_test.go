package metrics

import (
	"testing"

	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/throttle"
)

// Constructors of the policy packages for arguments a test knows to be
// valid.

func mustLimiter(tb testing.TB, r ratelimit.Limit, b int) *ratelimit.Limiter {
	tb.Helper()
	l, err := ratelimit.NewLimiter(r, b)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func mustKeyed(tb testing.TB, r ratelimit.Limit, b int, opts ...ratelimit.KeyedOption) *ratelimit.Keyed {
	tb.Helper()
	k, err := ratelimit.NewKeyed(r, b, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func mustBulkhead(tb testing.TB, limit int, opts ...bulkhead.Option) *bulkhead.Bulkhead {
	tb.Helper()
	b, err := bulkhead.New(limit, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func mustAdaptive(tb testing.TB, opts ...bulkhead.Option) *bulkhead.Adaptive {
	tb.Helper()
	a, err := bulkhead.NewAdaptive(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

func mustBreaker(tb testing.TB, opts ...breaker.Option) *breaker.Breaker {
	tb.Helper()
	b, err := breaker.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func mustThrottle(tb testing.TB, opts ...throttle.Option) *throttle.Throttle {
	tb.Helper()
	th, err := throttle.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return th
}

func mustManual(tb testing.TB, opts ...cpu.Option) *cpu.Monitor {
	tb.Helper()
	m, err := cpu.NewManual(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func mustController(tb testing.TB, p loadshed.Policy, targets []loadshed.Target, opts ...loadshed.Option) *loadshed.Controller {
	tb.Helper()
	c, err := loadshed.New(p, targets, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
