package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/internal/loadgen"
)

// target is a connection to an inventory server.
type target struct {
	addr   string
	conns  []*grpc.ClientConn
	client []inventoryv1.InventoryServiceClient
	next   atomic.Uint64
}

// dial connects to addr over n connections (plaintext: levee talks to
// loopback) and waits until the server's health service answers SERVING,
// at most readyTimeout.
func dial(ctx context.Context, addr string, n int, readyTimeout time.Duration) (*target, error) {
	t := &target{addr: addr}
	for range n {
		cc, err := grpc.NewClient(addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDisableRetry()) // the load generator counts its own retries
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("target %s: %w", addr, err)
		}
		t.conns = append(t.conns, cc)
		t.client = append(t.client, inventoryv1.NewInventoryServiceClient(cc))
	}
	if err := t.waitReady(ctx, readyTimeout); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// waitReady polls every connection's health check until all answer
// SERVING for the inventory service.
func (t *target) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, cc := range t.conns {
		hc := healthpb.NewHealthClient(cc)
		for {
			cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
			resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{Service: inventory.ServiceName})
			ccancel()
			if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if err == nil {
				err = fmt.Errorf("health status %v", resp.GetStatus())
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("target %s is not serving %s after %v: %v", t.addr, inventory.ServiceName, timeout, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// Close closes the connections.
func (t *target) Close() {
	for _, cc := range t.conns {
		_ = cc.Close()
	}
}

func (t *target) pick() inventoryv1.InventoryServiceClient {
	return t.client[t.next.Add(1)%uint64(len(t.client))]
}

// allocateCall returns a CallFunc that allocates one unit of a SKU for a
// fresh order per request (the same order id on every retry of a request,
// so retries are idempotent), and passes the server's pushback trailer on
// to the generator.
func (t *target) allocateCall(runID string) loadgen.CallFunc {
	skus := inventory.DefaultSKUs()
	return func(ctx context.Context) error {
		id, _ := loadgen.RequestID(ctx)
		var trailer metadata.MD
		_, err := t.pick().Allocate(ctx, &inventoryv1.AllocateRequest{
			Sku:      skus[id%uint64(len(skus))],
			Quantity: 1,
			OrderId:  runID + "-" + strconv.FormatUint(id, 10),
		}, grpc.Trailer(&trailer))
		return loadgen.PushbackFromTrailer(err, trailer)
	}
}

// calibrate measures the calls/s the server completes closed-loop:
// workers goroutines each send the next Allocate as soon as the previous
// one answered, for warmup (not counted) and then d. Errors are not
// counted as completed work.
func (t *target) calibrate(ctx context.Context, workers int, warmup, d time.Duration) (float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		counting  atomic.Bool
		completed atomic.Int64
		failures  atomic.Int64
		errMu     sync.Mutex
		firstErr  error
		wg        sync.WaitGroup
	)
	skus := inventory.DefaultSKUs()
	runID := fmt.Sprintf("calibrate-%d", time.Now().UnixNano())
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := t.client[w%len(t.client)]
			for i := 0; ctx.Err() == nil; i++ {
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := client.Allocate(cctx, &inventoryv1.AllocateRequest{
					Sku: skus[i%len(skus)], Quantity: 1, OrderId: fmt.Sprintf("%s-%d-%d", runID, w, i),
				})
				ccancel()
				switch {
				case ctx.Err() != nil:
				case err != nil:
					failures.Add(1)
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
				case counting.Load():
					completed.Add(1)
				}
			}
		}()
	}
	wait := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	err := wait(warmup)
	counting.Store(true)
	start := time.Now()
	if err == nil {
		err = wait(d)
	}
	counting.Store(false)
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	if err != nil {
		return 0, err
	}
	if completed.Load() == 0 {
		if firstErr != nil {
			return 0, fmt.Errorf("calibration: no call succeeded (%d failed): %w", failures.Load(), firstErr)
		}
		return 0, fmt.Errorf("calibration: no call completed in %v", d)
	}
	return float64(completed.Load()) / elapsed.Seconds(), nil
}
