package redisbench

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/levee-go/levee/internal/redistest"
	"github.com/levee-go/levee/redislimit"
)

// gcra is the limiter's own direct-mode script.
var gcra = redislimit.Script()

func sha(s string) string { h := sha1.Sum([]byte(s)); return hex.EncodeToString(h[:]) }

// keys spreads the benchmark over 64 buckets, as a fleet's tenants would.
var keys = func() []string {
	k := make([]string, 64)
	for i := range k {
		k[i] = "bench:{t" + strconv.Itoa(i) + "}"
	}
	return k
}()

const (
	argT   = "10"         // 100 000 tokens/s per key: most calls are admitted
	argTau = "1000000000" // a large burst
)

// BenchmarkClient compares go-redis v9 and rueidis on the limiter's one
// round trip, EVALSHA of the GCRA script, serial and from 16 goroutines.
func BenchmarkClient(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	sum := sha(gcra)

	gr := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
	defer gr.Close()
	if err := gr.ScriptLoad(ctx, gcra).Err(); err != nil {
		b.Fatal(err)
	}
	ru, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer ru.Close()

	calls := map[string]func(key string) error{
		"goredis": func(key string) error {
			return gr.EvalSha(ctx, sum, []string{key}, argT, argTau, 1).Err()
		},
		"rueidis": func(key string) error {
			return ru.Do(ctx, ru.B().Evalsha().Sha1(sum).Numkeys(1).Key(key).Arg(argT, argTau, "1").Build()).Error()
		},
	}
	for _, name := range []string{"goredis", "rueidis"} {
		call := calls[name]
		serialAndParallel(b, name, func(key string) bool { return call(key) == nil })
	}
}

// serialAndParallel benchmarks call, which reports success, from one
// goroutine and from 16 (8 per core), spread over the 64 keys.
func serialAndParallel(b *testing.B, name string, call func(key string) bool) {
	b.Run(name+"/serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if !call(keys[i&63]) {
				b.Fatal("refused or failed")
			}
			i++
		}
	})
	b.Run(name+"/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(8)
		var next atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			i := next.Add(1)
			for pb.Next() {
				if !call(keys[i&63]) {
					b.Error("refused or failed")
					return
				}
				i++
			}
		})
	})
}
