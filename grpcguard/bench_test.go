package grpcguard

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	mwratelimit "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"golang.org/x/time/rate"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/ratelimit"
)

// BenchmarkUnaryChain calls a unary interceptor chain directly with a
// no-op handler, every call admitted, in three forms measured in one run:
//
//   - levee: Server's interceptor with a global bucket, per-peer buckets
//     and a bulkhead (issue goal: ≤ 150 ns, 0 allocs);
//   - peer: the same three limits as most Go services build them today,
//     go-grpc-middleware v2's ratelimit interceptor over an x/time/rate
//     Limiter, the same over a mutex-guarded map of per-peer x/time/rate
//     Limiters, and seed 002's channel semaphore, chained the way
//     grpc.ChainUnaryInterceptor chains them;
//   - floor: levee's three policies called directly with one clock read,
//     with no interceptor, rule or contract around them.
//
// Both chains find the peer key with levee's decide.PeerKey, which formats it
// once per connection.
func BenchmarkUnaryChain(b *testing.B) {
	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.Run("levee", func(b *testing.B) {
		s, ctx := chainServer(b)
		b.ReportAllocs()
		for b.Loop() {
			s.unary(ctx, nil, info, handler)
		}
	})
	b.Run("peer", func(b *testing.B) {
		_, ctx := chainServer(b)
		chain := peerChain(1e9, 1<<30, 1024)
		b.ReportAllocs()
		for b.Loop() {
			chain(ctx, nil, info, handler)
		}
	})
	b.Run("floor", func(b *testing.B) {
		lim := mustLimiter(b, 1e9, 1<<30)
		keyed := mustKeyed(b, 1e9, 1<<30, ratelimit.WithSweepInterval(0))
		slots := mustBulkhead(b, 1024)
		epoch := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			now := epoch.Add(time.Since(epoch))
			lim.AllowN(now, 1)
			keyed.AllowN("127.0.0.1", now, 1)
			p, _ := slots.TryAcquire()
			p.Release()
		}
	})
}

// xrateLimiter is go-grpc-middleware's ratelimit.Limiter over one
// x/time/rate Limiter.
type xrateLimiter struct{ l *rate.Limiter }

func (x xrateLimiter) Limit(context.Context) error {
	if !x.l.Allow() {
		return errors.New("rate limit exceeded")
	}
	return nil
}

// xratePerPeer is the usual per-client limiter: a map of x/time/rate
// Limiters under a mutex, keyed by the peer address.
type xratePerPeer struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	r     rate.Limit
	burst int
	key   decide.KeyFunc
}

func (x *xratePerPeer) Limit(ctx context.Context) error {
	key := x.key(callFacts(ctx, "", decide.Unary))
	x.mu.Lock()
	l := x.m[key]
	if l == nil {
		l = rate.NewLimiter(x.r, x.burst)
		x.m[key] = l
	}
	x.mu.Unlock()
	if !l.Allow() {
		return errors.New("rate limit exceeded")
	}
	return nil
}

// peerChain builds the peer of BenchmarkUnaryChain: a global and a
// per-peer x/time/rate limit through go-grpc-middleware, then a channel
// semaphore, chained like grpc.ChainUnaryInterceptor.
func peerChain(r rate.Limit, burst, slots int) grpc.UnaryServerInterceptor {
	sem := make(chan struct{}, slots)
	bulk := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		select {
		case sem <- struct{}{}:
		default:
			return nil, status.Error(codes.ResourceExhausted, "too many calls in flight")
		}
		defer func() { <-sem }()
		return handler(ctx, req)
	}
	return chainUnary(
		mwratelimit.UnaryServerInterceptor(xrateLimiter{rate.NewLimiter(r, burst)}),
		mwratelimit.UnaryServerInterceptor(&xratePerPeer{m: map[string]*rate.Limiter{}, r: r, burst: burst, key: decide.PeerKey()}),
		bulk,
	)
}

// chainUnary nests interceptors the way grpc.ChainUnaryInterceptor does
// (grpc-go does not export its chaining): each one's handler is a closure
// made per call that runs the next.
func chainUnary(ics ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	var next func(i int, info *grpc.UnaryServerInfo, final grpc.UnaryHandler) grpc.UnaryHandler
	next = func(i int, info *grpc.UnaryServerInfo, final grpc.UnaryHandler) grpc.UnaryHandler {
		if i == len(ics)-1 {
			return final
		}
		return func(ctx context.Context, req any) (any, error) {
			return ics[i+1](ctx, req, info, next(i+1, info, final))
		}
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return ics[0](ctx, req, info, next(0, info, handler))
	}
}

// BenchmarkUnaryChainParallel is BenchmarkUnaryChain's levee and peer
// chains called from every P at once.
func BenchmarkUnaryChainParallel(b *testing.B) {
	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	run := func(b *testing.B, ctx context.Context, chain grpc.UnaryServerInterceptor) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				chain(ctx, nil, info, handler)
			}
		})
	}
	b.Run("levee", func(b *testing.B) {
		s, ctx := chainServer(b)
		run(b, ctx, s.unary)
	})
	b.Run("peer", func(b *testing.B) {
		_, ctx := chainServer(b)
		run(b, ctx, peerChain(1e9, 1<<30, 1024))
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
		lim := mustLimiter(b, 0, 1)
		lim.Allow() // empty for good
		s := mustServer(b, []decide.Rule{{Guards: []admission.Guard{ratelimit.NewGuard("rate", lim)}}})
		run(b, s.ServerOptions(), codes.ResourceExhausted)
	})
}
