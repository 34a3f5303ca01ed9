package loadshed_test

import (
	"testing"
	"time"

	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/ratelimit"
)

// mustLimiter is ratelimit.NewLimiter for arguments a test knows to be
// valid.
func mustLimiter(tb testing.TB, r ratelimit.Limit, b int) *ratelimit.Limiter {
	tb.Helper()
	l, err := ratelimit.NewLimiter(r, b)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// mustManual is cpu.NewManual for options a test knows to be valid.
func mustManual(tb testing.TB, opts ...cpu.Option) *cpu.Monitor {
	tb.Helper()
	m, err := cpu.NewManual(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// observe is Controller.Observe for a reading a test knows to be valid,
// with targets that take every scale.
func observe(tb testing.TB, c *loadshed.Controller, now time.Time, u float64, sat bool) float64 {
	tb.Helper()
	s, err := c.Observe(now, u, sat)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// mustController is loadshed.New for a policy a test knows to be valid.
func mustController(tb testing.TB, p loadshed.Policy, targets []loadshed.Target, opts ...loadshed.Option) *loadshed.Controller {
	tb.Helper()
	c, err := loadshed.New(p, targets, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
