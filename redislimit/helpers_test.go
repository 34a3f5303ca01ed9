package redislimit

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/levee-go/levee/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// rueidis's cluster client closes the connections of nodes it
		// dropped from its slot map 5 s later, in a goroutine of its own
		// that its Close does not wait for; it ends by itself.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

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
	// A generous timeout by default: on a busy machine under the race
	// detector a round trip can take longer than the default.
	l, err := New(c, name, rate, burst, append([]Option{WithTimeout(time.Second)}, opts...)...)
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

// redisNow reads Redis's clock (TIME) as a duration since the Unix epoch.
func redisNow(tb testing.TB, s *redistest.Server) time.Duration {
	tb.Helper()
	f := strings.Fields(s.Do("TIME"))
	sec, err1 := strconv.ParseInt(f[0], 10, 64)
	usec, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		tb.Fatalf("TIME = %q", f)
	}
	return time.Duration(sec)*time.Second + time.Duration(usec)*time.Microsecond
}

// settle waits for l's first heartbeat, then resets the server's command
// counts, so that they count only what the test does next.
func settle(tb testing.TB, s *redistest.Server, l *Limiter) {
	tb.Helper()
	eventually(tb, 5*time.Second, "first heartbeat", func() bool { return l.Stats().Heartbeats > 0 })
	s.Do("CONFIG", "RESETSTAT")
}
