package redislimit

import (
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/levee-go/levee/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// withNow sets the limiter's local clock.
func withNow(f func() time.Time) Option { return func(o *options) { o.now = f } }

// withRedisNow makes the script read the instant f gives (µs) instead of
// Redis's TIME, so that tests drive the shared bucket through exact
// instants.
func withRedisNow(f func() int64) Option { return func(o *options) { o.redisNow = f } }

// newClient returns a rueidis client to addr, closed when the test ends.
func newClient(tb testing.TB, addr string) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		tb.Fatalf("rueidis.NewClient(%s): %v", addr, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// mustNew returns a Limiter closed when the test ends (before its client:
// cleanups run last registered first).
func mustNew(tb testing.TB, c rueidis.Client, name string, rate float64, burst int, opts ...Option) *Limiter {
	tb.Helper()
	l, err := New(c, name, rate, burst, opts...)
	if err != nil {
		tb.Fatalf("New(%q, %v, %d): %v", name, rate, burst, err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// eventually polls cond every few milliseconds until it holds or within
// passes, and reports how long it took.
func eventually(tb testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	tb.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			tb.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

// single starts one redis-server and returns it with a client to it.
func single(tb testing.TB) (*redistest.Server, rueidis.Client) {
	tb.Helper()
	s := redistest.Start(tb)
	return s, newClient(tb, s.Addr())
}
