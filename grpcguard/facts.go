package grpcguard

import (
	"context"
	"crypto/x509"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/decide"
)

// What grpc-go knows of a call, as the engine's facts (decide.Facts).

// tapMD is the decide.Lookup of a call in the tap: its headers from the
// metadata grpc-go hands the tap, without a copy, its peer and identity
// from the transport's context.
type tapMD metadata.MD

func (m tapMD) Header(_ context.Context, name string) (string, bool) {
	if v := m[name]; len(v) > 0 {
		return v[0], true
	}
	return "", false
}

func (tapMD) Peer(ctx context.Context) net.Addr { return peerAddr(ctx) }

func (tapMD) VerifiedLeaf(ctx context.Context) *x509.Certificate { return verifiedLeaf(ctx) }

// incoming is the decide.Lookup of a call in an interceptor: everything
// from the call's context (metadata.ValueFromIncomingContext copies a
// header's values when the call has it).
type incoming struct{}

func (incoming) Header(ctx context.Context, name string) (string, bool) {
	if v := metadata.ValueFromIncomingContext(ctx, name); len(v) > 0 {
		return v[0], true
	}
	return "", false
}

func (incoming) Peer(ctx context.Context) net.Addr { return peerAddr(ctx) }

func (incoming) VerifiedLeaf(ctx context.Context) *x509.Certificate { return verifiedLeaf(ctx) }

// peerAddr is the address of ctx's peer, or nil.
func peerAddr(ctx context.Context) net.Addr {
	if p, ok := peer.FromContext(ctx); ok {
		return p.Addr
	}
	return nil
}

// verifiedLeaf is the verified client certificate of ctx's peer, or nil.
func verifiedLeaf(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return info.State.VerifiedChains[0][0]
}

// tapFacts are the facts of a call in the tap, of kind: grpc-go does not
// say it there, so it is the kind its method's handlers showed before, or
// decide.UnknownKind.
func tapFacts(ctx context.Context, info *tap.Info, kind decide.Kind) decide.Facts {
	f := decide.Facts{Ctx: ctx, Method: info.FullMethodName, Kind: kind, Lookup: tapMD(info.Header)}
	if info.Header == nil {
		f.Lookup = incoming{}
	}
	f.Deadline, _ = ctx.Deadline()
	return f
}

// callFacts are the facts of a call in an interceptor.
func callFacts(ctx context.Context, method string, kind decide.Kind) decide.Facts {
	f := decide.Facts{Ctx: ctx, Method: method, Kind: kind, Lookup: incoming{}}
	f.Deadline, _ = ctx.Deadline()
	return f
}

// streamKind is the kind of a stream by its info.
func streamKind(info *grpc.StreamServerInfo) decide.Kind {
	switch {
	case info.IsClientStream && info.IsServerStream:
		return decide.BidiStream
	case info.IsClientStream:
		return decide.ClientStream
	}
	return decide.ServerStream
}

// MetadataKey adapts a key function of the form grpcguard.KeyFunc took
// before the engine (decide) to a decide.KeyFunc: fn gets the call's
// context and, in the tap, its incoming metadata (nil in the
// interceptors: read it from ctx then).
//
// Deprecated: write a decide.KeyFunc, which reads headers with
// Facts.Header on every transport. MetadataKey will be removed in the
// release after next.
func MetadataKey(fn func(ctx context.Context, md metadata.MD) string) decide.KeyFunc {
	return func(f decide.Facts) string {
		md, _ := f.Lookup.(tapMD)
		ctx := f.Ctx
		if ctx == nil {
			ctx = context.Background()
		}
		return fn(ctx, metadata.MD(md))
	}
}
