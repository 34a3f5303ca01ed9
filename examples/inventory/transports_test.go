package inventory

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1/inventoryv1connect"
	"github.com/levee-go/levee/internal/guardtest"
)

// One ConnectHandler serves the three protocols, keeps the service's
// codes, and answers health checks to a grpc-go client.
func TestConnectHandlerServesEveryProtocol(t *testing.T) {
	srv := newServer(t, WithStock("mug", 100), WithCPUWork(0))
	h, _ := ConnectHandler(srv)
	base := guardtest.ServeH2C(t, h)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []connect.ClientOption
	}{
		{"connect", nil},
		{"grpc", []connect.ClientOption{connect.WithGRPC()}},
		{"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := inventoryv1connect.NewInventoryServiceClient(&http.Client{Transport: guardtest.H2CTransport(t)}, base, tc.opts...)
			res, err := c.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "mug", Quantity: 1, OrderId: "o-" + tc.name})
			if err != nil || res.GetQuantity() != 1 {
				t.Fatalf("Allocate = %v, %v; want 1 unit", res, err)
			}
			_, err = c.GetStock(ctx, &inventoryv1.GetStockRequest{Sku: "no such sku"})
			if got := connect.CodeOf(err); got != connect.CodeNotFound {
				t.Errorf("GetStock(unknown sku) code = %v, want not_found (%v)", got, err)
			}
		})
	}

	conn, err := grpc.NewClient(strings.TrimPrefix(base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: ServiceName})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("grpc-go health Check = %v, %v; want SERVING", hc, err)
	}
	_, err = inventoryv1.NewInventoryServiceClient(conn).Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "mug"})
	if got := status.Code(err); got != codes.InvalidArgument {
		t.Errorf("grpc-go Allocate(no order id) code = %v, want InvalidArgument", got)
	}
}

func TestHTTPHandlerRoutes(t *testing.T) {
	srv := newServer(t, WithStock("mug", 10), WithCPUWork(0))
	ts := httptest.NewServer(HTTPHandler(srv))
	defer ts.Close()
	tests := []struct {
		name       string
		method     string
		path, body string
		wantStatus int
		wantIn     string
	}{
		{"allocate", "POST", "/v1/allocate", `{"sku":"mug","quantity":3,"orderId":"o1"}`, 200, `"remaining":"7"`},
		{"allocate retried", "POST", "/v1/allocate", `{"sku":"mug","quantity":3,"orderId":"o1"}`, 200, `"remaining":"7"`},
		{"out of stock", "POST", "/v1/allocate", `{"sku":"mug","quantity":30,"orderId":"o2"}`, 400, `"code":9`},
		{"not JSON", "POST", "/v1/allocate", `{`, 400, `"code":3`},
		{"release", "POST", "/v1/release", `{"orderId":"o1"}`, 200, `"released":true`},
		{"unknown order", "POST", "/v1/release", `{"orderId":"nope"}`, 404, `"code":5`},
		{"stock", "GET", "/v1/stock/mug", ``, 200, `"available":"10"`},
		{"unknown route", "GET", "/v1/nothing", ``, 404, ``},
		{"wrong method", "GET", "/v1/allocate", ``, 405, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader(tt.body))
			res, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.wantStatus || !strings.Contains(string(b), tt.wantIn) {
				t.Errorf("%s %s = %d %s; want %d containing %s", tt.method, tt.path, res.StatusCode, b, tt.wantStatus, tt.wantIn)
			}
			if tt.wantIn != "" && !json.Valid(b) {
				t.Errorf("%s %s: body %q is not JSON", tt.method, tt.path, b)
			}
		})
	}
	for pattern := range HTTPMethods {
		if _, got := HTTPHandler(srv).Handler(httptest.NewRequest(strings.Fields(pattern)[0], strings.ReplaceAll(strings.Fields(pattern)[1], "{sku}", "x"), nil)); got != pattern {
			t.Errorf("HTTPMethods names %q, which HTTPHandler does not route (got %q)", pattern, got)
		}
	}
}
