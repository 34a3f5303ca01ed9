package main

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/protect"
)

// stockClient returns a client of the inventory service at addr on a
// connection of its own, closed when the test ends; dials counts the
// connections it opened.
func stockClient(t *testing.T, addr string, dials *atomic.Int32) inventoryv1.InventoryServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return inventoryv1.NewInventoryServiceClient(cc)
}

func getStock(c inventoryv1.InventoryServiceClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.GetStock(ctx, &inventoryv1.GetStockRequest{Sku: inventory.DefaultSKUs()[0]})
	return err
}

// TestServeMaxConns: `levee serve -max-conns 2`, through real grpc-go
// clients: the third client's connection is reset (UNAVAILABLE) while the
// first two keep being served, and /stats counts the refusals.
func TestServeMaxConns(t *testing.T) {
	addr, _, _ := startServe(t, "-max-conns", "2")
	var dials atomic.Int32
	first, second := stockClient(t, addr, &dials), stockClient(t, addr, &dials)
	for _, c := range []inventoryv1.InventoryServiceClient{first, second} {
		if err := getStock(c); err != nil {
			t.Fatalf("GetStock on one of the first two connections: %v", err)
		}
	}
	if err := getStock(stockClient(t, addr, &dials)); status.Code(err) != codes.Unavailable {
		t.Fatalf("GetStock on the third connection = %v, want UNAVAILABLE (connection reset)", err)
	}
	for i := range 20 {
		for _, c := range []inventoryv1.InventoryServiceClient{first, second} {
			if err := getStock(c); err != nil {
				t.Fatalf("GetStock %d on a connection under the cap: %v", i, err)
			}
		}
	}
	if n := dials.Load(); n != 3 {
		t.Fatalf("%d connections dialled, want 3: the first two must not have been dropped", n)
	}
}

// saturatedCPU reads saturated: evidence of overload for the preset. It
// measures no utilisation (0), so the run limit follows Saturated alone.
type saturatedCPU struct{}

func (saturatedCPU) Utilization() float64 { return 0 }
func (saturatedCPU) Saturated() bool      { return true }

// TestServeGoAway: `levee serve -goaway` with the preset's CPU forced
// saturated (sustained overload): the server sends GOAWAY, the client
// reconnects by itself, and none of its calls fails.
func TestServeGoAway(t *testing.T) {
	addr, _, _ := startServeWith(t, []protect.Option{protect.WithCPU(saturatedCPU{})},
		"-goaway", "-goaway-after", "0s", "-goaway-every", "50ms", "-max-conns-per-peer", "100")
	var dials atomic.Int32
	c := stockClient(t, addr, &dials)
	deadline := time.Now().Add(20 * time.Second)
	calls := 0
	for dials.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("after %d calls in 20 s the client dialled %d times, want 3: GOAWAY twice", calls, dials.Load())
		}
		if err := getStock(c); err != nil {
			t.Fatalf("GetStock %d: %v, want every call served across GOAWAYs", calls, err)
		}
		calls++
	}
}

func TestServeConnFlagsInListeningLine(t *testing.T) {
	c, out, _ := testCLI(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- c.run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-cpu-work", "100us", "-max-conns", "7", "-max-conns-per-peer", "3", "-goaway"})
	}()
	listening(t, out, done)
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("serve exited %d", code)
	}
	for _, want := range []string{"max-conns=7 max-conns-per-peer=3 goaway=10s/10s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("listening line lacks %q:\n%s", want, out)
		}
	}
}
