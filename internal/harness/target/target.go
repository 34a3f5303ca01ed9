// Package target is the load generator's side of a running inventory
// server: gRPC connections that wait for its health check, the Allocate
// call the generator sends, a closed-loop capacity measurement, and a run
// of open-loop phases that also reads what the server recorded on /stats.
// `levee load` and the scenarios of `levee demo` share it.
package target

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
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
	"github.com/levee-go/levee/internal/harness/stats"
)

// Target is a set of connections to an inventory server. Create it with
// Dial; Close closes it. It is safe for concurrent use.
type Target struct {
	addr   string
	conns  []*grpc.ClientConn
	client []inventoryv1.InventoryServiceClient
	next   atomic.Uint64
	md     metadata.MD // sent with every Allocate; nil: none
}

// Dial connects to addr over n connections (plaintext: levee talks to
// loopback) and waits until the server's health service answers SERVING,
// at most readyTimeout. Its connections do not retry: the load generator
// counts its own retries.
func Dial(ctx context.Context, addr string, n int, readyTimeout time.Duration) (*Target, error) {
	return DialOptions(ctx, addr, n, readyTimeout, grpc.WithDisableRetry())
}

// DialOptions is Dial with opts in place of grpc.WithDisableRetry: a
// client's retry policy (grpc.WithDefaultServiceConfig), say.
func DialOptions(ctx context.Context, addr string, n int, readyTimeout time.Duration, opts ...grpc.DialOption) (*Target, error) {
	t := &Target{addr: addr}
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	for range n {
		cc, err := grpc.NewClient(addr, opts...)
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
func (t *Target) waitReady(ctx context.Context, timeout time.Duration) error {
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
func (t *Target) Close() {
	for _, cc := range t.conns {
		_ = cc.Close()
	}
}

// SetMetadata sends the metadata pairs (key, value, ...) with every
// Allocate call made after it (a tenant header, a criticality class).
func (t *Target) SetMetadata(kv ...string) { t.md = metadata.Pairs(kv...) }

// Client returns a client of the next connection, round robin.
func (t *Target) Client() inventoryv1.InventoryServiceClient {
	return t.client[t.next.Add(1)%uint64(len(t.client))]
}

// AllocateCall returns a CallFunc that allocates one unit of a SKU for a
// fresh order per request (the same order id on every retry of a request,
// so retries are idempotent), and passes the server's pushback trailer on
// to the generator.
func (t *Target) AllocateCall(runID string) loadgen.CallFunc {
	return t.AllocateCallWith(runID, t.md)
}

// AllocateCallWith is AllocateCall sending md (nil: none) with every call.
func (t *Target) AllocateCallWith(runID string, md metadata.MD) loadgen.CallFunc {
	skus := inventory.DefaultSKUs()
	return func(ctx context.Context) error {
		id, _ := loadgen.RequestID(ctx)
		if md != nil {
			ctx = metadata.NewOutgoingContext(ctx, md)
		}
		var trailer metadata.MD
		_, err := t.Client().Allocate(ctx, &inventoryv1.AllocateRequest{
			Sku:      skus[id%uint64(len(skus))],
			Quantity: 1,
			OrderId:  runID + "-" + strconv.FormatUint(id, 10),
		}, grpc.Trailer(&trailer))
		return loadgen.PushbackFromTrailer(err, trailer)
	}
}

// GetStockCall returns a CallFunc that reads the stock of a SKU.
func (t *Target) GetStockCall() loadgen.CallFunc {
	skus := inventory.DefaultSKUs()
	return func(ctx context.Context) error {
		id, _ := loadgen.RequestID(ctx)
		var trailer metadata.MD
		_, err := t.Client().GetStock(ctx, &inventoryv1.GetStockRequest{Sku: skus[id%uint64(len(skus))]}, grpc.Trailer(&trailer))
		return loadgen.PushbackFromTrailer(err, trailer)
	}
}

// Calibrate measures the calls/s the server completes closed-loop:
// workers goroutines each send the next Allocate as soon as the previous
// one answered, for warmup (not counted) and then d. Errors are not
// counted as completed work.
func (t *Target) Calibrate(ctx context.Context, workers int, warmup, d time.Duration) (float64, error) {
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

// Run runs phases of Allocate calls against t with the generator options
// opts and, if sc is not nil, reads what the server recorded meanwhile,
// waiting at most drain for the calls it still holds. The run is returned
// even with an error if the generator ran: it covers the part that ran.
// An error from loadgen.New (bad phases or options) wraps
// loadgen.ErrInvalid.
func (t *Target) Run(ctx context.Context, sc *stats.Client, drain time.Duration, phases []loadgen.Phase, opts []loadgen.Option) (report.Run, error) {
	runID := fmt.Sprintf("load-%d", time.Now().UnixNano())
	gen, err := loadgen.New(t.AllocateCall(runID), phases, opts...)
	if err != nil {
		return report.Run{}, err
	}
	res, runErr := gen.Run(ctx)
	run := report.Run{Result: res}
	if sc != nil {
		// A fresh context: the samples are wanted even after an interrupt.
		sctx, cancel := context.WithTimeout(context.Background(), stats.DefaultTimeout)
		samples, err := sc.ServerSamples(sctx, res.Start, drain)
		cancel()
		run.Server = samples
		if err != nil && runErr == nil {
			runErr = fmt.Errorf("reading server stats: %w", err)
		}
	}
	return run, runErr
}
