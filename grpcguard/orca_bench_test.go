package grpcguard

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/orca"
)

// BenchmarkORCALoopback compares, in one run over a real 127.0.0.1
// connection, an admitted no-op call through levee's chain (bucket +
// per-peer bucket + bulkhead) alone, with an ORCA counting around it,
// with levee's per-call reports (WithORCAPerCall), and with grpc-go's
// per-call reports (orca.CallMetricsServerOption with the ORCA as its
// provider; it sends a trailer only for calls whose handler asked for a
// recorder, so an interceptor asks on every call), and with both: grpc-go's
// option ahead of levee's per-call reports, which go into its recorder.
func BenchmarkORCALoopback(b *testing.B) {
	run := func(b *testing.B, sopts func(s *Server) []grpc.ServerOption) {
		s, _ := chainServer(b)
		env := startServer(b, &testService{}, true, sopts(s))
		ctx := context.Background()
		if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil { // connect
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
				b.Fatalf("EmptyCall() = %v", err)
			}
		}
	}
	withORCA := func(opts ...ORCAOption) func(s *Server) []grpc.ServerOption {
		return func(s *Server) []grpc.ServerOption {
			r := mustORCA(b, s, append([]ORCAOption{WithORCACPU(&fixedUtil{}), WithORCACapacity(newFixedCap(4))}, opts...)...)
			return r.ServerOptions()
		}
	}
	b.Run("guard", func(b *testing.B) { run(b, (*Server).ServerOptions) })
	b.Run("orca", func(b *testing.B) { run(b, withORCA()) })
	b.Run("orca-percall", func(b *testing.B) { run(b, withORCA(WithORCAPerCall())) })
	b.Run("grpc-callmetrics", func(b *testing.B) {
		run(b, func(s *Server) []grpc.ServerOption {
			r := mustORCA(b, s, WithORCACPU(&fixedUtil{}), WithORCACapacity(newFixedCap(4)))
			ask := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				orca.CallMetricsRecorderFromContext(ctx)
				return h(ctx, req)
			}
			return append([]grpc.ServerOption{orca.CallMetricsServerOption(r), grpc.ChainUnaryInterceptor(ask)}, r.ServerOptions()...)
		})
	})
	b.Run("grpc-callmetrics-levee-percall", func(b *testing.B) { // levee's report in the application's recorder
		run(b, func(s *Server) []grpc.ServerOption {
			r := mustORCA(b, s, WithORCACPU(&fixedUtil{}), WithORCACapacity(newFixedCap(4)), WithORCAPerCall())
			return append([]grpc.ServerOption{orca.CallMetricsServerOption(nil)}, r.ServerOptions()...)
		})
	})
}

// BenchmarkORCAInterceptor calls the ORCA's unary interceptor (which runs
// the Server's) directly with a no-op handler, beside the Server's alone:
// the ORCA's own cost without and with per-call
// reports: grpc.SetTrailer on a stream that joins the trailer to its own
// as grpc-go's does (the transport's encoding of it is not included).
func BenchmarkORCAInterceptor(b *testing.B) {
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.Run("guard", func(b *testing.B) {
		s, ctx := chainServer(b)
		b.ReportAllocs()
		for b.Loop() {
			s.unary(ctx, nil, orcaInfo, handler)
		}
	})
	for _, c := range []struct {
		name string
		opts []ORCAOption
	}{{"counting", nil}, {"percall", []ORCAOption{WithORCAPerCall()}}} {
		b.Run(c.name, func(b *testing.B) {
			s, ctx := chainServer(b)
			r := mustORCA(b, s, append([]ORCAOption{WithORCACapacity(newFixedCap(4))}, c.opts...)...)
			st := &keptTrailerStream{}
			ctx = grpc.NewContextWithServerTransportStream(ctx, st)
			b.ReportAllocs()
			for b.Loop() {
				st.trailer = nil
				r.unary(ctx, nil, orcaInfo, handler)
			}
		})
	}
}
