package grpcguard

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/ratelimit"
)

// BenchmarkUnaryChain calls the unary interceptor directly with a no-op
// handler through a global bucket, per-peer buckets and a bulkhead, all
// admitting (goal: ≤ 150 ns, 0 allocs).
func BenchmarkUnaryChain(b *testing.B) {
	s, ctx := chainServer(b)
	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.ReportAllocs()
	for b.Loop() {
		s.unary(ctx, nil, info, handler)
	}
}

// BenchmarkUnaryChainParallel is BenchmarkUnaryChain from every P.
func BenchmarkUnaryChainParallel(b *testing.B) {
	s, ctx := chainServer(b)
	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.unary(ctx, nil, info, handler)
		}
	})
}

// BenchmarkLoopback compares, in one run over a real 127.0.0.1
// connection, a bare no-op call, the same call admitted through levee's tap
// and interceptors (bucket + per-peer bucket + bulkhead), and a call
// refused by levee in the tap.
func BenchmarkLoopback(b *testing.B) {
	run := func(b *testing.B, sopts []grpc.ServerOption, want codes.Code) {
		env := startServer(b, &testService{}, true, sopts)
		ctx := context.Background()
		env.client.EmptyCall(ctx, &testgrpc.Empty{}) // connect
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			_, err := env.client.EmptyCall(ctx, &testgrpc.Empty{})
			if status.Code(err) != want {
				b.Fatalf("EmptyCall() = %v, want %v", err, want)
			}
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, nil, codes.OK) })
	b.Run("admitted", func(b *testing.B) {
		s, _ := chainServer(b)
		run(b, s.ServerOptions(), codes.OK)
	})
	b.Run("refused", func(b *testing.B) {
		s := mustServer(b, []Rule{{Guards: []Guard{RateLimit("rate", ratelimit.NewLimiter(0, 1))}}})
		lim := s.all[0].guards[0].(*rateGuard).l
		lim.Allow() // empty for good
		run(b, s.ServerOptions(), codes.ResourceExhausted)
	})
}

// BenchmarkUnaryChainParts is the floor under BenchmarkUnaryChain: the
// same three guards' policies called directly, plus the one clock read,
// with no interceptor, rule or contract around them.
func BenchmarkUnaryChainParts(b *testing.B) {
	lim := ratelimit.NewLimiter(1e9, 1<<30)
	keyed := ratelimit.NewKeyed(1e9, 1<<30, ratelimit.WithSweepInterval(0))
	slots := bulkhead.New(1024)
	epoch := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		now := epoch.Add(time.Since(epoch))
		lim.AllowN(now, 1)
		keyed.AllowN("127.0.0.1", now, 1)
		p, _ := slots.TryAcquire()
		p.Release()
	}
}
