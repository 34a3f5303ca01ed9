package main

import (
	"context"
	"net"
	"testing"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// BenchmarkInterceptor puts one unary call with a no-op handler through
// each protection's interceptor, in process and without a transport:
// what the protection's own code costs a call that is admitted, beside
// the same call unprotected, in one run. The -parallel forms call from
// every P at once and report the process's CPU per call (cpu-ns/op), so
// that shared state whose cache lines move between processors shows
// (compare -cpu 1 and -cpu 2).
//
//	go test -run '^$' -bench Interceptor -cpu 1,2 -count 5 .
func BenchmarkInterceptor(b *testing.B) {
	info := &grpc.UnaryServerInfo{FullMethod: allocateMethod}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}})
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, c := range []struct {
		name  string
		build func(b *testing.B) grpc.UnaryServerInterceptor
	}{
		{"none", func(*testing.B) grpc.UnaryServerInterceptor {
			return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				return h(ctx, req)
			}
		}},
		{"levee", func(b *testing.B) grpc.UnaryServerInterceptor {
			p, stop, err := leveePreset()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(stop)
			return p.Guard().UnaryServerInterceptor()
		}},
		{"failsafe", func(*testing.B) grpc.UnaryServerInterceptor {
			return failsafegrpc.NewUnaryServerInterceptor[any](adaptivelimiter.NewWithDefaults[any]())
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			in := c.build(b)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := in(ctx, nil, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"-parallel", func(b *testing.B) {
			in := c.build(b)
			cpu0, ok := processCPUSelf()
			if !ok {
				b.Skip("no getrusage here")
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := in(ctx, nil, info, handler); err != nil {
						b.Error(err)
						return
					}
				}
			})
			cpu1, _ := processCPUSelf()
			b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
