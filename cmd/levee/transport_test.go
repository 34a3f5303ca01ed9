package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1/inventoryv1connect"
	"github.com/levee-go/levee/internal/harness/loadgen"
)

// startServeTransport runs `levee serve -transport transport args...` in
// this process until the test ends, and returns the service's address
// and the metrics address.
func startServeTransport(t *testing.T, transport string, args ...string) (addr, metricsAddr string) {
	t.Helper()
	sc, out, errOut := testCLI(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- sc.run(ctx, append([]string{"serve", "-transport", transport, "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-cpu-work", "1ms"}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("serve -transport %s exited %d after shutdown, want 0; stderr:\n%s", transport, code, errOut)
			}
		case <-time.After(shutdownGrace + 2*time.Second):
			t.Errorf("serve -transport %s did not shut down", transport)
		}
	})
	grpcAddr, metricsAddr := listening(t, out, done)
	addr = grpcAddr
	for _, f := range strings.Fields(out.String()) {
		if v, ok := strings.CutPrefix(f, "api="); ok {
			addr = v
		}
	}
	if !strings.Contains(out.String(), "transport="+transport) {
		t.Errorf("listening line %q does not name transport %s", out, transport)
	}
	return addr, metricsAddr
}

// `levee serve -transport connect` serves the Connect, gRPC and gRPC-Web
// protocols on one port, health and reflection included, protected: levee
// load's grpc-go client and a connect-go client both reach it.
func TestServeConnectTransport(t *testing.T) {
	addr, metricsAddr := startServeTransport(t, transportConnect)
	ctx := context.Background()
	for _, opts := range [][]connect.ClientOption{nil, {connect.WithGRPCWeb()}} {
		c := inventoryv1connect.NewInventoryServiceClient(http.DefaultClient, "http://"+addr, opts...)
		_, err := c.GetStock(ctx, &inventoryv1.GetStockRequest{Sku: "no such sku"})
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound {
			t.Errorf("connect-go GetStock(unknown sku) = %v, want NOT_FOUND", err)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("grpc-go health Check = %v, %v; want SERVING", hc, err)
	}

	jsonPath := filepath.Join(t.TempDir(), "load.json")
	lc, _, loadErr := testCLI(t)
	if code := lc.run(ctx, []string{"load", "-target", addr, "-stats", metricsAddr,
		"-phases", "a:500ms:40", "-deadline", "2s", "-capacity", "100", "-json", jsonPath}); code != exitOK {
		t.Fatalf("levee load exited %d; stderr:\n%s", code, loadErr)
	}
	var res loadgen.Result
	b, err := os.ReadFile(jsonPath)
	if err == nil {
		err = json.Unmarshal(b, &res)
	}
	if err != nil || res.Total.Offered != 20 || res.Total.Succeeded != res.Total.Offered {
		t.Errorf("levee load through connect: offered %d, succeeded %d (%v); want 20 of 20 (an idle server refuses nothing)", res.Total.Offered, res.Total.Succeeded, err)
	}
}

// `levee serve -transport http` serves a JSON route per method, protected.
func TestServeHTTPTransport(t *testing.T) {
	addr, _ := startServeTransport(t, transportHTTP)
	for _, tt := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/v1/stock/no-such-sku", "", http.StatusNotFound},
		{"POST", "/v1/allocate", `{"sku":"x"}`, http.StatusBadRequest},
		{"GET", "/healthz", "", http.StatusOK},
	} {
		req, _ := http.NewRequest(tt.method, "http://"+addr+tt.path, strings.NewReader(tt.body))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tt.want {
			t.Errorf("%s %s = %d %s, want %d", tt.method, tt.path, res.StatusCode, b, tt.want)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}
