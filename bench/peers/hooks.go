package main

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"
)

// hooksKey is the context key under which hooksTap hands its call to the
// interceptors.
type hooksKey struct{}

// hooksCall is what hooksTap hands to the interceptors: the least that a
// protection deciding in the tap and finishing in the interceptor passes
// from one to the other. The interceptor clears method, so that a test
// can tell that it found the call.
type hooksCall struct{ method string }

// hooksProtection installs hooksTap and the interceptors hooksUnary and
// hooksStream. They decide nothing: against "none", they are grpc-go's
// own price of protecting in the tap and the interceptor, which every such
// protection pays before its first decision (-peak's floor; not in the
// default run).
func hooksProtection(serverSpec) ([]grpc.ServerOption, func(), error) {
	return []grpc.ServerOption{grpc.InTapHandle(hooksTap), grpc.UnaryInterceptor(hooksUnary), grpc.StreamInterceptor(hooksStream)}, func() {}, nil
}

// hooksTap hands each call to the interceptors in its context: one
// context.WithValue and one object, as any tap that tells its
// interceptor what it granted must.
func hooksTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	return context.WithValue(ctx, hooksKey{}, &hooksCall{method: info.FullMethodName}), nil
}

// hooksUnary finds the tap's call and runs the handler.
func hooksUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if c, _ := ctx.Value(hooksKey{}).(*hooksCall); c != nil {
		c.method = ""
	}
	return handler(ctx, req)
}

// hooksStream finds the tap's call and runs the handler.
func hooksStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if c, _ := ss.Context().Value(hooksKey{}).(*hooksCall); c != nil {
		c.method = ""
	}
	return handler(srv, ss)
}
