// Command client calls a gRPC server through levee's client interceptors
// (grpcguard.NewClient): per target a hold-off after a server's pushback,
// per method an adaptive throttle and a circuit breaker that count only
// overload answers, and retries of a server's overload refusals within a
// retry budget. It sends -n Allocate calls to the inventory service at
// -target, -rate per second whether or not earlier ones finished, prints
// how they ended and what each client guard decided, and exits.
//
//	go run ./examples/server &
//	go run ./examples/client -target 127.0.0.1:50051 -n 2000 -rate 1000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/grpcguard"
)

func main() {
	target := flag.String("target", "127.0.0.1:50051", "address of the inventory service")
	n := flag.Int("n", 200, "calls to send")
	rate := flag.Float64("rate", 100, "calls per second")
	timeout := flag.Duration("timeout", time.Second, "deadline of each call")
	flag.Parse()
	if *n < 1 || !(*rate > 0) {
		log.Fatal("client: want -n >= 1 and -rate > 0")
	}

	guard, err := grpcguard.NewClient(
		grpcguard.WithRetries(3), // at most 3 attempts, only for a server's overload refusals, within the retry budget
	)
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(*target, append(guard.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(), // levee's Client retries; grpc-go's retries would bypass its guards
	)...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := inventoryv1.NewInventoryServiceClient(conn)

	var (
		mu      sync.Mutex
		outcome = map[string]int{}
		wg      sync.WaitGroup
	)
	start := time.Now()
	tick := time.NewTicker(time.Duration(float64(time.Second) / *rate))
	defer tick.Stop()
	for i := range *n {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), *timeout)
			defer cancel()
			_, err := client.Allocate(ctx, &inventoryv1.AllocateRequest{
				Sku: "SKU-0001", Quantity: 1, OrderId: fmt.Sprintf("example-%d-%d", start.UnixNano(), i),
			})
			what := status.Code(err).String()
			if errors.Is(err, grpcguard.ErrClientRefused) {
				what = "refused by the client, never sent"
			}
			mu.Lock()
			outcome[what]++
			mu.Unlock()
		}()
	}
	wg.Wait()

	fmt.Printf("%d calls in %v:\n", *n, time.Since(start).Round(time.Millisecond))
	for _, k := range sortedKeys(outcome) {
		fmt.Printf("  %-36s %d\n", k, outcome[k])
	}
	fmt.Println("client guards:")
	byGuard := map[string][2]uint64{}
	for _, s := range guard.Stats() {
		c := byGuard[s.Guard]
		byGuard[s.Guard] = [2]uint64{c[0] + s.Admitted, c[1] + s.Refused}
	}
	for _, g := range sortedKeys(byGuard) {
		fmt.Printf("  %-10s admitted %d, refused %d\n", g, byGuard[g][0], byGuard[g][1])
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
