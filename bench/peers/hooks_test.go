package main

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
)

// The hooks protection's interceptors find the call its tap handed them,
// unary and stream: the floor it measures includes the hand-over.
func TestHooksHandTheCallOver(t *testing.T) {
	ctx, err := hooksTap(context.Background(), &tap.Info{FullMethodName: allocateMethod})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := ctx.Value(hooksKey{}).(*hooksCall)
	if c == nil || c.method != allocateMethod {
		t.Fatalf("the tap's call = %+v, want one for %s", c, allocateMethod)
	}
	ran := false
	if _, err := hooksUnary(ctx, nil, nil, func(context.Context, any) (any, error) { ran = true; return nil, nil }); err != nil || !ran {
		t.Fatalf("hooksUnary: handler ran %v, err %v; want ran, nil", ran, err)
	}
	if c.method != "" {
		t.Errorf("after hooksUnary the call's method = %q, want it found and cleared", c.method)
	}
	ctx, _ = hooksTap(context.Background(), &tap.Info{FullMethodName: "/corecart.inventory.v1.InventoryService/Feed"})
	c, _ = ctx.Value(hooksKey{}).(*hooksCall)
	ran = false
	if err := hooksStream(nil, ctxStream{ctx: ctx}, nil, func(any, grpc.ServerStream) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("hooksStream: handler ran %v, err %v; want ran, nil", ran, err)
	}
	if c.method != "" {
		t.Errorf("after hooksStream the call's method = %q, want it found and cleared", c.method)
	}
}

// A server behind the hooks protection runs its tap and its unary
// interceptor on every call: the handler finds the tap's call in its
// context, cleared by the interceptor; and it serves the load's calls.
func TestHooksServe(t *testing.T) {
	var hooks protection
	for _, p := range protections {
		if p.name == "hooks" {
			hooks = p
		}
	}
	if hooks.build == nil {
		t.Fatal("no protection named hooks")
	}
	opts, stop, err := hooks.build(serverSpec{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	addr := serveGRPC(t, opts, func(gs *grpc.Server) { testgrpc.RegisterTestServiceServer(gs, hooksCheck{}) })
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 3 {
		if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
			t.Fatalf("EmptyCall behind hooks = %v, want success", err)
		}
	}
	invAddr, _ := serveInProcess(t, hooks)
	inv, err := grpc.NewClient(invAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	if _, err := inventoryv1.NewInventoryServiceClient(inv).Allocate(ctx, &inventoryv1.AllocateRequest{Sku: inventory.DefaultSKUs()[0], Quantity: 1, OrderId: "hooks-1"}); err != nil {
		t.Errorf("Allocate behind hooks = %v, want success", err)
	}
}

// hooksCheck's EmptyCall fails unless hooksTap handed its call in the
// context and hooksUnary found it (and cleared its method).
type hooksCheck struct {
	testgrpc.UnimplementedTestServiceServer
}

func (hooksCheck) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	c, _ := ctx.Value(hooksKey{}).(*hooksCall)
	switch {
	case c == nil:
		return nil, status.Error(codes.Internal, "no call from the tap in the handler's context")
	case c.method != "":
		return nil, status.Errorf(codes.Internal, "the tap's call for %s was not found by the interceptor", c.method)
	}
	return &testgrpc.Empty{}, nil
}

// ctxStream is a grpc.ServerStream of which only Context is used.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }
