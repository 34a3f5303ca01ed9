package grpcguard

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// TestMetadataKey: a key function of the old form gets the tap's
// metadata in the tap, and nil (with the metadata in its context) in the
// interceptors.
func TestMetadataKey(t *testing.T) {
	old := func(ctx context.Context, md metadata.MD) string {
		if md != nil {
			return "md:" + strings.Join(md["x-tenant-id"], ",")
		}
		return "ctx:" + strings.Join(metadata.ValueFromIncomingContext(ctx, "x-tenant-id"), ",")
	}
	kf := MetadataKey(old)
	md := metadata.Pairs("x-tenant-id", "acme")
	if got := kf(tapFacts(context.Background(), &tap.Info{Header: md}, decide.Unary)); got != "md:acme" {
		t.Errorf("MetadataKey in the tap = %q, want md:acme", got)
	}
	ctx := metadata.NewIncomingContext(context.Background(), md)
	if got := kf(callFacts(ctx, emptyCall, decide.Unary)); got != "ctx:acme" {
		t.Errorf("MetadataKey in an interceptor = %q, want ctx:acme", got)
	}
	if got := kf(decide.Facts{}); got != "ctx:" {
		t.Errorf("MetadataKey on the zero Facts = %q, want ctx:", got)
	}
}

// TestForEngine: two Servers on one engine share its rules and counts;
// ForEngine refuses a nil engine and exemptions of its own.
func TestForEngine(t *testing.T) {
	e, err := decide.New([]decide.Rule{{Guards: []admission.Guard{&recorder{}}}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := ForEngine(e)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ForEngine(e, WithStreamLimits(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, s := range []*Server{a, b} {
		if _, err := s.unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: emptyCall}, handler); err != nil {
			t.Fatal(err)
		}
	}
	if a.HandlerStarts() != 2 || b.HandlerStarts() != 2 || a.Engine() != e {
		t.Errorf("HandlerStarts = %d and %d, want 2 for both Servers of one engine", a.HandlerStarts(), b.HandlerStarts())
	}
	if _, err := ForEngine(nil); err == nil {
		t.Error("ForEngine(nil) = nil error")
	}
	if _, err := ForEngine(e, WithExempt()); err == nil || !strings.Contains(err.Error(), "WithExempt") {
		t.Errorf("ForEngine(e, WithExempt()) = %v, want an error naming WithExempt", err)
	}
}
