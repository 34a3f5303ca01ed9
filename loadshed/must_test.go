package loadshed_test

import (
	"testing"

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
