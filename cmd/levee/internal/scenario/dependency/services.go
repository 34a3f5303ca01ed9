package dependency

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/grpcguard"
)

// Faults the dependency scenario injects into the downstream.
const (
	faultSlow = "slow" // calls hang for the slowness, then are served
	// faultFail: calls fail at once with UNAVAILABLE, the answer of a
	// service that cannot serve (its store is unreachable). Not INTERNAL:
	// levee's client counts only overload answers against a downstream
	// (grpcguard.ClassifyError), and an INTERNAL is the application's.
	faultFail = "fail"
)

// incident is the downstream's scheduled fault: during [from, to) a share
// of its calls is hit by the fault. The zero value has no window yet and
// hits nothing. Its methods are safe for concurrent use.
type incident struct {
	fault    string
	slowness time.Duration
	share    float64 // in (0, 1]

	from, to atomic.Int64  // unix ns; both 0 until schedule
	seen     atomic.Uint64 // calls that arrived during the window
}

// schedule sets the incident's window.
func (in *incident) schedule(from, to time.Time) {
	in.from.Store(from.UnixNano())
	in.to.Store(to.UnixNano())
}

// hitsAt reports whether a call arriving at now is hit by the fault. Of
// the calls arriving during the window, share of them are, spread evenly:
// the k-th is hit when floor(k·share) > floor((k-1)·share).
func (in *incident) hitsAt(now time.Time) bool {
	t, from, to := now.UnixNano(), in.from.Load(), in.to.Load()
	if from == 0 || t < from || t >= to {
		return false
	}
	k := float64(in.seen.Add(1))
	return math.Floor(k*in.share) > math.Floor((k-1)*in.share)
}

// gauge counts calls in flight. The zero value is ready; it is safe for
// concurrent use.
type gauge struct{ n atomic.Int64 }

func (g *gauge) inc()        { g.n.Add(1) }
func (g *gauge) dec()        { g.n.Add(-1) }
func (g *gauge) load() int64 { return g.n.Load() }

// inventoryPrefix starts the full names of the inventory service's
// methods.
const inventoryPrefix = "/" + inventory.ServiceName + "/"

// downstream is the service the front calls before it allocates: a second
// inventory server (a warehouse that reserves the stock), with the
// incident's fault injected in front of its handlers. Stop it with stop.
type downstream struct {
	inc      *incident
	srv      *inventory.Server
	gs       *grpc.Server
	addr     string
	received atomic.Uint64
	inFlight gauge
	stopping chan struct{} // closed by stop: hung calls return
	served   chan struct{} // closed when Serve has returned
}

// startDownstream serves a downstream with the incident's fault on a
// loopback port.
func startDownstream(inc *incident) (*downstream, error) {
	srv, err := inventory.NewServer(inventory.WithCPUWork(0))
	if err != nil {
		return nil, fmt.Errorf("downstream: %w", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("downstream: %w", err)
	}
	d := &downstream{
		inc:      inc,
		srv:      srv,
		addr:     lis.Addr().String(),
		stopping: make(chan struct{}),
		served:   make(chan struct{}),
	}
	// WaitForHandlers: Stop returns once every handler has, so that no
	// goroutine outlives the run.
	d.gs = grpc.NewServer(grpc.ChainUnaryInterceptor(d.intercept), grpc.WaitForHandlers(true))
	inventory.Register(d.gs, d.srv)
	go func() {
		defer close(d.served)
		_ = d.gs.Serve(lis)
	}()
	return d, nil
}

// intercept counts the inventory calls the downstream receives and
// applies the fault to those the incident hits. A slow call ignores its
// caller's deadline, as a handler stuck on a lock or a database does: it
// holds its goroutine for the whole slowness (or until stop).
func (d *downstream) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !strings.HasPrefix(info.FullMethod, inventoryPrefix) {
		return handler(ctx, req)
	}
	d.received.Add(1)
	d.inFlight.inc()
	defer d.inFlight.dec()
	if d.inc.hitsAt(time.Now()) {
		switch d.inc.fault {
		case faultFail:
			return nil, status.Error(codes.Unavailable, "warehouse: reservation store unreachable (injected fault)")
		case faultSlow:
			t := time.NewTimer(d.inc.slowness)
			select {
			case <-t.C:
			case <-d.stopping:
				t.Stop()
				return nil, status.Error(codes.Unavailable, "warehouse: shutting down")
			}
		}
	}
	return handler(ctx, req)
}

// stop releases hung calls and stops the server.
func (d *downstream) stop() {
	close(d.stopping)
	d.gs.Stop()
	<-d.served
}

// front is the inventory service as the dependency scenario runs it: its
// Allocate first reserves the stock at the downstream warehouse (with a
// deadline of its own), then allocates locally. A failed reservation
// fails the Allocate with UNAVAILABLE. Release and GetStock are the
// inventory server's. It is safe for concurrent use.
type front struct {
	*inventory.Server
	warehouse inventoryv1.InventoryServiceClient
	deadline  time.Duration // for each downstream call

	inFlight  gauge
	finished  atomic.Uint64 // Allocate handler runs
	late      atomic.Uint64 // of which finished after the caller's deadline or cancel
	refused   atomic.Uint64 // reservations a client guard refused, not sent
	timedOut  atomic.Uint64 // reservations sent that ran out of deadline
	failed    atomic.Uint64 // reservations sent that failed otherwise
	succeeded atomic.Uint64 // reservations that succeeded
}

// Allocate reserves at the warehouse, then allocates.
func (f *front) Allocate(ctx context.Context, req *inventoryv1.AllocateRequest) (*inventoryv1.AllocateResponse, error) {
	f.inFlight.inc()
	defer func() {
		if ctx.Err() != nil {
			f.late.Add(1)
		}
		f.finished.Add(1)
		f.inFlight.dec()
	}()
	if err := f.reserve(ctx, req); err != nil {
		return nil, err
	}
	return f.Server.Allocate(ctx, req)
}

// reserve calls the warehouse and turns its failures into the front's
// answer: UNAVAILABLE, for the front cannot allocate without a
// reservation, whatever the warehouse said. A call refused by a client
// guard keeps its own UNAVAILABLE status (and retry delay).
func (f *front) reserve(ctx context.Context, req *inventoryv1.AllocateRequest) error {
	dctx, cancel := context.WithTimeout(ctx, f.deadline)
	_, err := f.warehouse.Allocate(dctx, req)
	cancel()
	switch {
	case err == nil:
		f.succeeded.Add(1)
		return nil
	case errors.Is(err, grpcguard.ErrClientRefused):
		f.refused.Add(1)
		return err
	case ctx.Err() != nil:
		// The front's own caller gave up first.
		f.failed.Add(1)
		return status.FromContextError(ctx.Err()).Err()
	case status.Code(err) == codes.DeadlineExceeded:
		f.timedOut.Add(1)
		return status.Errorf(codes.Unavailable, "inventory: warehouse did not answer within %v", f.deadline)
	}
	f.failed.Add(1)
	st := status.Convert(err)
	return status.Errorf(codes.Unavailable, "inventory: warehouse failed: %v: %s", st.Code(), st.Message())
}

// frontServer is a front served on a loopback port, with its connection
// to the warehouse. Stop it with stop.
type frontServer struct {
	*front
	gs     *grpc.Server
	cc     *grpc.ClientConn
	addr   string
	served chan struct{}
}

// startFront serves a front whose Allocate burns iterations SHA-256 rounds
// and calls the warehouse at warehouseAddr through dialOpts (a client
// guard's, or none).
func startFront(warehouseAddr string, deadline time.Duration, iterations int, dialOpts []grpc.DialOption) (*frontServer, error) {
	srv, err := inventory.NewServer(inventory.WithWorkIterations(iterations))
	if err != nil {
		return nil, fmt.Errorf("front: %w", err)
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry()}, dialOpts...)
	cc, err := grpc.NewClient(warehouseAddr, opts...)
	if err != nil {
		return nil, fmt.Errorf("front: connecting to the warehouse: %w", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = cc.Close()
		return nil, fmt.Errorf("front: %w", err)
	}
	f := &front{
		Server:    srv,
		warehouse: inventoryv1.NewInventoryServiceClient(cc),
		deadline:  deadline,
	}
	s := &frontServer{front: f, cc: cc, addr: lis.Addr().String(), served: make(chan struct{})}
	s.gs = grpc.NewServer(grpc.WaitForHandlers(true))
	inventoryv1.RegisterInventoryServiceServer(s.gs, f)
	hs := health.NewServer()
	hs.SetServingStatus(inventory.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s.gs, hs)
	go func() {
		defer close(s.served)
		_ = s.gs.Serve(lis)
	}()
	return s, nil
}

// stop stops the server, then closes its warehouse connection.
func (s *frontServer) stop() {
	s.gs.Stop()
	<-s.served
	_ = s.cc.Close()
}

// depSample is the dependency scenario's counters at one instant.
type depSample struct {
	at time.Time

	frontFinished, frontLate                 uint64
	frontRefused, frontTimedOut, frontFailed uint64
	frontInFlight                            int64
	received, downstreamWasted               uint64
	downstreamInFlight                       int64
	breakerOpenings                          uint64
	breakerRefused, throttleDropped          uint64
}

// depSampler samples a front and its downstream every interval from a
// goroutine of its own until stop, which takes a last sample and returns
// them all. It also samples just before each of its marks (the phase
// boundaries): the report counts a sample's interval in the phase where
// the interval ends, so a tick that lands just after a boundary would
// count the whole interval before it in the next phase.
type depSampler struct {
	front      *front
	downstream *downstream
	guard      *guardedDial // nil: the front has no client guard

	mu      sync.Mutex
	samples []depSample
	done    chan struct{}
	exited  chan struct{}
}

// markLead is how long before a mark the sampler samples: enough for a
// timer that fires a few milliseconds late on a busy machine to sample
// before the mark, little enough that the calls of the next phase it
// counts in the earlier one are a call or two.
const markLead = 20 * time.Millisecond

func startDepSampler(f *front, d *downstream, g *guardedDial, interval time.Duration, marks []time.Time) *depSampler {
	s := &depSampler{front: f, downstream: d, guard: g, done: make(chan struct{}), exited: make(chan struct{})}
	s.record()
	go func() {
		defer close(s.exited)
		t := time.NewTicker(interval)
		defer t.Stop()
		next := func() <-chan time.Time {
			for len(marks) > 0 {
				d := time.Until(marks[0].Add(-markLead))
				marks = marks[1:]
				if d > 0 {
					return time.After(d)
				}
			}
			return nil
		}
		mark := next()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				s.record()
			case <-mark:
				s.record()
				mark = next()
			}
		}
	}()
	return s
}

func (s *depSampler) record() {
	f, d := s.front, s.downstream
	st := d.srv.Stats()
	smp := depSample{
		at:                 time.Now(),
		frontFinished:      f.finished.Load(),
		frontLate:          f.late.Load(),
		frontRefused:       f.refused.Load(),
		frontTimedOut:      f.timedOut.Load(),
		frontFailed:        f.failed.Load(),
		frontInFlight:      f.inFlight.load(),
		received:           d.received.Load(),
		downstreamInFlight: d.inFlight.load(),
		downstreamWasted:   st.Late + st.Canceled,
	}
	if s.guard != nil {
		smp.breakerOpenings = s.guard.openings.Load()
		for _, gs := range s.guard.guard.Stats() {
			switch gs.Guard {
			case "breaker":
				smp.breakerRefused += gs.Refused
			case "throttle":
				smp.throttleDropped += gs.Refused
			}
		}
	}
	s.mu.Lock()
	s.samples = append(s.samples, smp)
	s.mu.Unlock()
}

// stop ends the sampling goroutine, takes a last sample and returns all.
func (s *depSampler) stop() []depSample {
	close(s.done)
	<-s.exited
	s.record()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}
