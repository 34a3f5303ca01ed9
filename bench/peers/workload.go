package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
)

// This file is the server side of the shapes the inventory service has no
// option for: work that grows with a request's quantity, a dependency whose
// latency the benchmark changes in the middle of a run, a server-streaming
// method and allocation-heavy handlers. shapedServer wraps an
// inventory.Server built without CPU work or database, which still keeps
// the stock; the wrapper does the work first.

// feedMethod is the server-streaming method of the stream shape. The
// service exists only in this benchmark: a request is an AllocateRequest
// whose quantity is the number of messages, each an AllocateResponse.
const (
	feedService = "levee.peers.v1.Feed"
	feedMethod  = "/" + feedService + "/Allocations"
)

// feeder is the handler type of the Feed service (grpc.RegisterService
// checks the server against it).
type feeder interface {
	feed(req *inventoryv1.AllocateRequest, stream grpc.ServerStream) error
}

var feedDesc = grpc.ServiceDesc{
	ServiceName: feedService,
	HandlerType: (*feeder)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Allocations",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			req := new(inventoryv1.AllocateRequest)
			if err := stream.RecvMsg(req); err != nil {
				return err
			}
			return srv.(feeder).feed(req, stream)
		},
	}},
}

// feedStreamDesc is the client's description of the Feed method.
var feedStreamDesc = grpc.StreamDesc{StreamName: "Allocations", ServerStreams: true}

// shapedServer is the inventory service with the work of a shape in front
// of each Allocate (and the Feed stream). It is safe for concurrent use.
type shapedServer struct {
	*inventory.Server

	unitIter int         // SHA-256 rounds per unit of a request's quantity; 0: none
	dep      *dependency // nil: none
	objects  int         // objects each Allocate allocates and keeps until it returns; 0: none

	sink atomic.Uint64 // folds in the work's results so that it cannot be elided
}

var _ feeder = (*shapedServer)(nil)

// Allocate does the shape's work, then lets the inventory apply the order:
// quantity × unitIter SHA-256 rounds, then objects allocations, then a
// query of the dependency (holding one of its connections).
func (s *shapedServer) Allocate(ctx context.Context, req *inventoryv1.AllocateRequest) (*inventoryv1.AllocateResponse, error) {
	if n := int(req.GetQuantity()); s.unitIter > 0 && n > 0 {
		sum := inventory.Burn(n*s.unitIter, uint64(len(req.GetOrderId())))
		s.sink.Add(uint64(sum[0]))
	}
	if s.objects > 0 {
		s.sink.Add(churn(s.objects, uint64(len(req.GetOrderId()))))
	}
	if s.dep != nil {
		if err := s.dep.query(ctx); err != nil {
			return nil, status.Errorf(status.FromContextError(err).Code(), "peers: dependency: %v", err)
		}
	}
	return s.Server.Allocate(ctx, req)
}

// feed sends req.Quantity messages, each after unitIter SHA-256 rounds.
// It touches no stock.
func (s *shapedServer) feed(req *inventoryv1.AllocateRequest, stream grpc.ServerStream) error {
	for i := range req.GetQuantity() {
		if s.unitIter > 0 {
			sum := inventory.Burn(s.unitIter, uint64(i))
			s.sink.Add(uint64(sum[0]))
		}
		if err := stream.SendMsg(&inventoryv1.AllocateResponse{OrderId: req.GetOrderId(), Sku: req.GetSku(), Quantity: 1, Remaining: int64(i)}); err != nil {
			return err
		}
	}
	return nil
}

// iterationsFor returns the SHA-256 rounds that take about d on this
// machine, as the inventory measures them (once per process).
func iterationsFor(d time.Duration) (int, error) {
	probe, err := inventory.NewServer(inventory.WithCPUWork(d))
	if err != nil {
		return 0, err
	}
	return probe.WorkIterations(), nil
}

// object is one allocation of the allocation-heavy shape: 64 bytes, with a
// pointer, so that the collector has to trace it.
type object struct {
	next *object
	vals [7]uint64
}

// churn allocates n objects linked in a list, fills them, keeps the whole
// list alive until it has read it back, and returns its checksum: about
// n × 64 bytes of garbage per call, all of it live while the call runs.
func churn(n int, seed uint64) uint64 {
	var head *object
	x := seed | 1
	for range n {
		o := &object{next: head}
		for j := range o.vals {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			o.vals[j] = x
		}
		head = o
	}
	var sum uint64
	for o := head; o != nil; o = o.next {
		sum += o.vals[0] ^ o.vals[6]
	}
	return sum
}

// retained is the allocation-heavy shape's long-lived heap (a cache, say):
// every collection has to mark it. Written once, before the server serves.
//
//lint:ignore U1000 written, never read: it keeps the heap reachable
var retained *object

// retain builds a long-lived list of about mib MiB of objects.
func retain(mib int) {
	n := mib << 20 / 64
	var head *object
	for i := range n {
		head = &object{next: head, vals: [7]uint64{uint64(i)}}
	}
	retained = head
}

// dependency is a simulated database pool: conns connections, each query
// holding one for the latency (a timer wait, no CPU), slowdown times longer
// while slow is set. A call that finds every connection taken waits for
// one in arrival order (blocked channel senders are served first come,
// first served), watching its context, as the inventory's own database.
type dependency struct {
	conns    chan struct{}
	latency  time.Duration
	slowdown float64
	slow     atomic.Bool
}

func newDependency(conns int, latency time.Duration, slowdown float64) *dependency {
	return &dependency{conns: make(chan struct{}, conns), latency: latency, slowdown: slowdown}
}

// query takes a connection, holds it for the current latency and gives it
// back; it returns ctx's error if ctx ends first.
func (d *dependency) query(ctx context.Context) error {
	select {
	case d.conns <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-d.conns }()
	t := time.NewTimer(d.current())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Commands the benchmark writes, one per line, to a server's stdin.
const (
	cmdSlow = "slow" // the dependency becomes slowdown times slower
	cmdFast = "fast" // the dependency is back to its latency
)

// follow applies the commands read from r to d until r ends, saying on
// log what it did.
func (d *dependency) follow(r io.Reader, log io.Writer) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		switch c := strings.TrimSpace(sc.Text()); c {
		case cmdSlow, cmdFast:
			d.slow.Store(c == cmdSlow)
			fmt.Fprintf(log, "dependency %s (latency %v)\n", c, d.current())
		}
	}
}

// current returns the latency of a query started now.
func (d *dependency) current() time.Duration {
	if d.slow.Load() {
		return time.Duration(float64(d.latency) * d.slowdown)
	}
	return d.latency
}
