package grpcguard

import (
	"context"
	"testing"

	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc"

	"github.com/levee-go/levee/ratelimit"
)

func noopInvoker(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	return nil
}

// clientBenchCases are the unary interceptors compared by the client
// benchmarks, all around a no-op invoker:
//
//   - direct: the invoker alone;
//   - gobreaker: sony/gobreaker v2's Execute around the invoker, the peer;
//   - levee-breaker: a Client with a breaker only;
//   - levee-full: a Client with breaker, throttle and a target bucket
//     that never runs dry, plus the hold-off check and the pooled trailer;
//   - levee-retries: levee-full with up to 3 attempts per call, whose
//     calls the target's retry budget counts.
func clientBenchCases(b *testing.B) []struct {
	name  string
	unary grpc.UnaryClientInterceptor
} {
	direct := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{Name: "peer"})
	peer := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		_, err := cb.Execute(func() (struct{}, error) { return struct{}{}, invoker(ctx, method, req, reply, cc, opts...) })
		return err
	}
	brkOnly, err := NewClient(WithThrottle(nil))
	if err != nil {
		b.Fatal(err)
	}
	full, err := NewClient(WithTargetLimit(ratelimit.Limit(1e9), 1_000_000_000))
	if err != nil {
		b.Fatal(err)
	}
	retries, err := NewClient(WithTargetLimit(ratelimit.Limit(1e9), 1_000_000_000), WithRetries(3))
	if err != nil {
		b.Fatal(err)
	}
	return []struct {
		name  string
		unary grpc.UnaryClientInterceptor
	}{
		{"direct", direct},
		{"gobreaker", peer},
		{"levee-breaker", brkOnly.UnaryClientInterceptor()},
		{"levee-full", full.UnaryClientInterceptor()},
		{"levee-retries", retries.UnaryClientInterceptor()},
	}
}

func BenchmarkClientUnary(b *testing.B) {
	cc := cliConn(b, "passthrough:///inventory")
	ctx := context.Background()
	for _, bc := range clientBenchCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.unary(ctx, cliMethod, nil, nil, cc, noopInvoker); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkClientUnaryParallel(b *testing.B) {
	cc := cliConn(b, "passthrough:///inventory")
	ctx := context.Background()
	for _, bc := range clientBenchCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := bc.unary(ctx, cliMethod, nil, nil, cc, noopInvoker); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkClientRefused is the cost of a call refused by an open breaker.
func BenchmarkClientRefused(b *testing.B) {
	cc := cliConn(b, "passthrough:///inventory")
	ctx := context.Background()
	c, err := NewClient()
	if err != nil {
		b.Fatal(err)
	}
	unary := c.UnaryClientInterceptor()
	_ = unary(ctx, cliMethod, nil, nil, cc, noopInvoker)
	c.Breaker(cc.Target(), cliMethod).ForceOpen()
	b.ReportAllocs()
	for b.Loop() {
		if err := unary(ctx, cliMethod, nil, nil, cc, noopInvoker); err == nil {
			b.Fatal("call admitted by a forced-open breaker")
		}
	}
}
