package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/internal/guardtest"
)

// serveJSON serves the inventory's JSON routes behind mw on a loopback
// port (HTTP/1.1 and h2c, as serve does) until the test ends, and returns
// its address.
func serveJSON(t *testing.T, mw func(http.Handler) http.Handler) string {
	t.Helper()
	srv, err := inventory.NewServer(inventory.WithCPUWork(0))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(guardtest.ServeH2C(t, inventory.HTTPHandler(srv, mw)), "http://")
}

// Every protection that serves the JSON routes lets the benchmark's
// requests through when the server is idle: an Allocate and a GetStock
// of the load succeed through its middleware.
func TestJSONProtectionsServeTheLoad(t *testing.T) {
	for _, p := range protections {
		if p.http == nil || ceilingServer(p) || p.name == "levee-http-refuse-all" {
			continue // the servers that refuse by design: TestCeiling, BenchmarkCallCPU
		}
		t.Run(p.name, func(t *testing.T) {
			mw, stop, err := p.http(serverSpec{})
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			w, err := dialWeb(ctx, serveJSON(t, mw), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			r, closeR, err := dialRequester(loadAllocate, endpoint{web: w}, "", "test")
			if err != nil {
				t.Fatal(err)
			}
			defer closeR()
			if err := r.request()(ctx, 1); err != nil {
				t.Errorf("Allocate through %s = %v, want success", p.name, err)
			}
			if err := (endpoint{web: w}).getStockCall()(ctx); err != nil {
				t.Errorf("GetStock through %s = %v, want success", p.name, err)
			}
		})
	}
}

// A refusal of the JSON routes reaches loadgen as a refusal (429, 503),
// a timeout (504) or a failure, as the gRPC load's statuses do.
func TestWebTargetCodes(t *testing.T) {
	for _, tt := range []struct {
		give int
		want codes.Code
	}{
		{http.StatusTooManyRequests, codes.ResourceExhausted},
		{http.StatusServiceUnavailable, codes.Unavailable},
		{http.StatusGatewayTimeout, codes.DeadlineExceeded},
		{http.StatusBadRequest, codes.InvalidArgument},
		{http.StatusTeapot, codes.Unknown},
	} {
		answer := func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(tt.give) })
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		w, err := dialWeb(ctx, serveJSON(t, answer), time.Minute)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		err = w.allocate(ctx, &inventoryv1.AllocateRequest{})
		if got := status.Code(err); got != tt.want {
			t.Errorf("allocate answered HTTP %d: error %v, code %v, want %v", tt.give, err, got, tt.want)
		}
		w.Close()
		cancel()
	}
	// A call whose deadline passes gets its context's error, as a gRPC
	// call gets DEADLINE_EXCEEDED.
	block := func(http.Handler) http.Handler {
		return http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := dialWeb(ctx, serveJSON(t, block), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer ccancel()
	if err := w.allocate(cctx, &inventoryv1.AllocateRequest{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("allocate past its deadline = %v, want context.DeadlineExceeded", err)
	}
}
