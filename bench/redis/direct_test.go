package redisbench

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/levee-go/levee/internal/redistest"
	"github.com/levee-go/levee/redislimit"
)

// BenchmarkDirect compares the limiter's direct mode (one round trip per
// call, through the breaker, with the timeout) with a bare EVALSHA of the
// same script on the same client (the goal: at most 1.2×), and with
// go-redis/redis_rate, which runs its own GCRA script over go-redis, in
// the same run; serial and from 16 goroutines. Every limit is far above
// what the benchmark asks, so every call is admitted.
func BenchmarkDirect(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	const rate, burst = 1e6, 1 << 30

	ru, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer ru.Close()
	lim, err := redislimit.New(ru, "bench", rate, burst, redislimit.WithHeartbeat(time.Minute, 2*time.Minute), redislimit.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	sum := sha(gcra)
	tau := strconv.Itoa(burst) // T = 1 µs
	if err := ru.Do(ctx, ru.B().ScriptLoad().Script(gcra).Build()).Error(); err != nil {
		b.Fatal(err)
	}

	gr := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
	defer gr.Close()
	rr := redis_rate.NewLimiter(gr)
	rrLimit := redis_rate.Limit{Rate: rate, Burst: burst, Period: time.Second}

	calls := []struct {
		name string
		call func(key string) bool
	}{
		{"redislimit", func(key string) bool { return lim.Allow(ctx, key).Allowed }},
		{"bare-evalsha", func(key string) bool {
			v, err := ru.Do(ctx, ru.B().Evalsha().Sha1(sum).Numkeys(1).Key(lim.Key(key)).Arg("1", tau, "1", "0").Build()).AsIntSlice()
			return err == nil && v[0] > 0
		}},
		{"redis_rate", func(key string) bool {
			r, err := rr.Allow(ctx, key, rrLimit)
			return err == nil && r.Allowed > 0
		}},
	}
	for _, c := range calls {
		serialAndParallel(b, c.name, c.call)
	}
	if st := lim.Stats(); st.Errors > 0 || st.LocalAllowed > 0 {
		b.Fatalf("the limiter fell back during the benchmark: %+v", st)
	}
}
