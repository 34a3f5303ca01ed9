package inventory_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
)

// Serve the inventory service on a loopback port, allocate stock, retry the
// same order and run out of stock.
func Example() {
	srv, err := inventory.NewServer(
		inventory.WithStock("mug", 10),
		inventory.WithCPUWork(0), // no simulated CPU work in this example
	)
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer()
	inventory.Register(gs, srv) // also health and reflection
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go gs.Serve(lis)
	defer gs.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	c := inventoryv1.NewInventoryServiceClient(conn)
	ctx := context.Background()

	req := &inventoryv1.AllocateRequest{Sku: "mug", Quantity: 4, OrderId: "order-1"}
	first, _ := c.Allocate(ctx, req)
	retry, _ := c.Allocate(ctx, req) // a retry returns the first answer
	fmt.Println("allocated", first.GetQuantity(), "remaining", first.GetRemaining())
	fmt.Println("retried   ", retry.GetQuantity(), "remaining", retry.GetRemaining())

	_, err = c.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "mug", Quantity: 7, OrderId: "order-2"})
	fmt.Println(status.Code(err))

	stock, _ := c.GetStock(ctx, &inventoryv1.GetStockRequest{Sku: "mug"})
	fmt.Println("available", stock.GetAvailable())
	st := srv.Stats()
	fmt.Println("applied", st.Allocated, "replayed", st.Replayed, "late", st.Late)
	// Output:
	// allocated 4 remaining 6
	// retried    4 remaining 6
	// FailedPrecondition
	// available 6
	// applied 1 replayed 1 late 0
}

// An I/O-bound inventory: after its CPU work (none here) every Allocate
// holds one of two database connections for 10ms. Four calls at once take
// turns on the two connections; a call whose caller has already gone
// changes nothing.
func ExampleWithDatabase() {
	srv, err := inventory.NewServer(
		inventory.WithStock("mug", 10),
		inventory.WithCPUWork(0),
		inventory.WithDatabase(2, 10*time.Millisecond),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &inventoryv1.AllocateRequest{Sku: "mug", Quantity: 1, OrderId: fmt.Sprintf("order-%d", i)}
			if _, err := srv.Allocate(ctx, req); err != nil {
				log.Fatal(err)
			}
		}()
	}
	wg.Wait()

	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = srv.Allocate(gone, &inventoryv1.AllocateRequest{Sku: "mug", Quantity: 1, OrderId: "order-gone"})
	fmt.Println(status.Code(err))

	mug, _ := srv.Stock("mug")
	st := srv.Stats()
	fmt.Println("available", mug.Available)
	fmt.Println("queries", st.DBQueries, "gave up", st.DBGaveUp)
	fmt.Println("connections", st.DBConns, "never more than 2 in use:", st.DBPeakInUse <= 2)
	// Output:
	// Canceled
	// available 6
	// queries 4 gave up 1
	// connections 2 never more than 2 in use: true
}

// NewServer checks every option and names each bad one.
func ExampleNewServer_badOptions() {
	_, err := inventory.NewServer(
		inventory.WithStock("mug", -1),
		inventory.WithDatabase(0, time.Millisecond),
	)
	fmt.Println(err)
	// Output:
	// inventory: WithStock("mug"): units must be >= 0, got -1
	// inventory: WithDatabase: conns must be >= 1, got 0
}
