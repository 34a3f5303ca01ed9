// Command retryspike measures how many attempts a gRPC client with a
// standard retry policy (grpc-go's service config: up to -attempts
// attempts on RESOURCE_EXHAUSTED) sends per call into a server in an
// open-loop spike, and what share of the calls succeed. It counts the
// attempts the server saw from levee's decision metrics (-metrics), so
// that a client's hidden retries are counted too; scripts/retryspike.py
// does the same with Python's grpcio.
//
//	levee serve -cpu 0 -addr 127.0.0.1:50061 -metrics-addr 127.0.0.1:9461 &
//	taskset -c 1 go run ./scripts/retryspike -target 127.0.0.1:50061 -metrics http://127.0.0.1:9461/metrics
//
// It is a measuring tool, not a test: nothing it prints is asserted.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/examples/inventory"
	inventorypb "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
)

func main() {
	target := flag.String("target", "127.0.0.1:50061", "gRPC `address` of levee serve")
	metrics := flag.String("metrics", "", "`URL` of the server's /metrics, to count the attempts it saw")
	capacity := flag.Float64("capacity", 0, "server capacity in calls/s (0: measure it closed-loop first)")
	attempts := flag.Int("attempts", 3, "maxAttempts of the retry policy")
	spike := flag.Duration("spike", 10*time.Second, "length of the 10x spike")
	flag.Parse()
	conn, err := grpc.NewClient(*target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "corecart.inventory.v1.InventoryService"}],
		  "retryPolicy": {"maxAttempts": %d, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
		    "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`, *attempts)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	client := inventorypb.NewInventoryServiceClient(conn)
	skus := inventory.DefaultSKUs()
	var seq atomic.Int64
	call := func(ctx context.Context) error {
		n := seq.Add(1)
		_, err := client.Allocate(ctx, &inventorypb.AllocateRequest{Sku: skus[n%int64(len(skus))], Quantity: 1, OrderId: "o" + strconv.FormatInt(n, 10)})
		return err
	}
	if *capacity == 0 {
		*capacity = measure(call)
	}
	if !(*capacity > 0) {
		fmt.Fprintln(os.Stderr, "retryspike: no call succeeded: capacity 0")
		os.Exit(1)
	}
	fmt.Printf("capacity %.0f calls/s\n", *capacity)
	before := attemptsSeen(*metrics)
	res := openLoop(call, 10**capacity, *spike)
	after := attemptsSeen(*metrics)
	fmt.Printf("spike: %d calls in %v at %.0f/s; ok %d (%.0f%% of capacity), codes %v\n",
		res.calls, *spike, 10**capacity, res.ok, 100*float64(res.ok)/(*capacity*spike.Seconds()), res.codes)
	if before >= 0 && after >= 0 {
		fmt.Printf("attempts the server saw: %.0f, %.2f per call\n", after-before, (after-before)/float64(res.calls))
	}
}

// measure runs closed-loop with 2 callers for 3s and returns calls/s.
func measure(call func(context.Context) error) float64 {
	var ok atomic.Int64
	end := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if call(ctx) == nil {
					ok.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	return float64(ok.Load()) / 3
}

type result struct {
	calls, ok int64
	codes     map[codes.Code]int64
}

// openLoop starts calls at Poisson arrivals of rate for d, each with a
// 1s deadline, and waits for them.
func openLoop(call func(context.Context) error, rate float64, d time.Duration) result {
	var mu sync.Mutex
	res := result{codes: map[codes.Code]int64{}}
	var wg sync.WaitGroup
	var inFlight atomic.Int64
	const maxInFlight = 20000
	start := time.Now()
	next := start
	for next.Sub(start) < d {
		time.Sleep(time.Until(next))
		next = next.Add(time.Duration(rand.ExpFloat64() / rate * float64(time.Second)))
		res.calls++
		if inFlight.Load() >= maxInFlight {
			mu.Lock()
			res.codes[codes.Canceled]++ // dropped by the generator
			mu.Unlock()
			continue
		}
		inFlight.Add(1)
		wg.Go(func() {
			defer inFlight.Add(-1)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := call(ctx)
			mu.Lock()
			res.codes[status.Code(err)]++
			if err == nil {
				res.ok++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return res
}

// attemptsSeen sums, from levee's /metrics, the decisions of the deadline
// guard (the first every attempt meets), or -1 without metrics.
func attemptsSeen(url string) float64 {
	if url == "" {
		return -1
	}
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "levee_decisions_total{") || !strings.Contains(line, `guard="deadline"`) {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}
