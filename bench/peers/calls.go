package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/target"
)

// loadKind is what the generator sends in a scenario.
type loadKind int

const (
	// loadAllocate: Allocate of one unit; the work is the server's fixed
	// CPU work (and database). The zero loadKind: named, never spelt out.
	//lint:ignore U1000 the zero value's name, for the reader
	loadAllocate loadKind = iota
	// loadHeavyTail: Allocate whose quantity, the units of work, is drawn
	// from a lognormal (heavyTail*).
	loadHeavyTail
	// loadTwoKinds: Allocate of one unit (cheap) or of costlyUnits
	// (costly), costlyShare of the calls.
	loadTwoKinds
	// loadStream: the Feed stream of streamMessages messages.
	loadStream
)

// The heavy tail: each Allocate's CPU work is lognormal with mean
// heavyTailMean and shape heavyTailSigma (median 0.92 ms, p99 16.9 ms,
// p99.9 44 ms: the slowest call in a hundred takes 18 times the median),
// in units of heavyTailUnit, at most heavyTailMax.
const (
	heavyTailMean  = 2 * time.Millisecond
	heavyTailSigma = 1.25
	heavyTailUnit  = 10 * time.Microsecond
	heavyTailMax   = 250 * time.Millisecond
)

// Two kinds of Allocate in one method, chosen by the request's quantity:
// one unit (cheapWork of CPU) or costlyUnits units, 30 times as much,
// costlyShare of the calls (the costly ones then use 77% of the CPU).
const (
	cheapWork   = 500 * time.Microsecond
	costlyUnits = 30
	costlyShare = 0.1
)

// streamMessages is how many messages one Feed stream sends.
const streamMessages = 5

// units returns the units of work request id asks for: its quantity. Every
// mode sees the same sequence of requests (ids count from 1 in each run).
func (k loadKind) units(id uint64) int32 {
	switch k {
	case loadHeavyTail:
		mu := math.Log(float64(heavyTailMean)/float64(heavyTailUnit)) - heavyTailSigma*heavyTailSigma/2
		z := rand.New(rand.NewPCG(id, 0x7461696c)).NormFloat64()
		u := math.Round(math.Exp(mu + heavyTailSigma*z))
		return int32(min(max(u, 1), float64(heavyTailMax/heavyTailUnit)))
	case loadTwoKinds:
		if rand.New(rand.NewPCG(id, 0x6b696e64)).Float64() < costlyShare {
			return costlyUnits
		}
		return 1
	case loadStream:
		return streamMessages
	}
	return 1
}

// variable reports whether the requests of k differ in cost: then goodput
// is counted in units of work, not calls.
func (k loadKind) variable() bool { return k == loadHeavyTail || k == loadTwoKinds }

// request issues request id of a run and returns its outcome, as a
// loadgen.CallFunc does.
type request func(ctx context.Context, id uint64) error

// requester makes the requests of a scenario to a server.
type requester struct {
	kind  loadKind
	alloc *target.Target
	web   *webTarget       // in place of alloc, for a server of JSON routes
	feed  *grpc.ClientConn // loadStream only
	runID string
}

// dialRequester returns the requester of kind for the server at addr,
// reached through e (and, for streams, a connection of its own, which the
// returned function closes).
func dialRequester(kind loadKind, e endpoint, addr, runID string) (requester, func(), error) {
	r := requester{kind: kind, alloc: e.grpc, web: e.web, runID: runID}
	if kind != loadStream {
		return r, func() {}, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
	if err != nil {
		return requester{}, nil, err
	}
	r.feed = cc
	return r, func() { _ = cc.Close() }, nil
}

// request returns the request function.
func (r requester) request() request {
	skus := inventory.DefaultSKUs()
	if r.kind == loadStream {
		return func(ctx context.Context, id uint64) error {
			return feedOnce(ctx, r.feed, &inventoryv1.AllocateRequest{Sku: skus[id%uint64(len(skus))], Quantity: streamMessages,
				OrderId: r.runID + "-" + strconv.FormatUint(id, 10)})
		}
	}
	allocation := func(id uint64) *inventoryv1.AllocateRequest {
		return &inventoryv1.AllocateRequest{
			Sku:      skus[id%uint64(len(skus))],
			Quantity: r.kind.units(id),
			OrderId:  r.runID + "-" + strconv.FormatUint(id, 10),
		}
	}
	if r.web != nil {
		return func(ctx context.Context, id uint64) error { return r.web.allocate(ctx, allocation(id)) }
	}
	return func(ctx context.Context, id uint64) error {
		var trailer metadata.MD
		_, err := r.alloc.Client().Allocate(ctx, allocation(id), grpc.Trailer(&trailer))
		return loadgen.PushbackFromTrailer(err, trailer)
	}
}

// feedOnce opens a Feed stream, reads it to its end and returns its status.
func feedOnce(ctx context.Context, cc *grpc.ClientConn, req *inventoryv1.AllocateRequest) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := cc.NewStream(ctx, &feedStreamDesc, feedMethod)
	if err != nil {
		return err
	}
	// A SendMsg that fails with io.EOF means the server ended the
	// stream: RecvMsg returns its status.
	if err := s.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	for {
		var m inventoryv1.AllocateResponse
		if err := s.RecvMsg(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return loadgen.PushbackFromTrailer(err, s.Trailer())
		}
	}
}

// calibrate measures the requests/s and the units of work/s a server
// completes closed-loop, as target.Calibrate does for Allocate: workers
// goroutines each send the next request (ids 1, 2, 3… in order, so the
// same mix as a run) as soon as the previous one answered, for warmup (not
// counted) and then d. Failed requests are not counted as work.
func calibrate(ctx context.Context, req request, kind loadKind, workers int, warmup, d time.Duration) (calls, work float64, err error) {
	r, err := closedLoop(ctx, req, kind, workers, warmup, d)
	return r.calls, r.work, err
}

// closedCounts is what a closed loop measured: the requests/s and units
// of work/s completed, and the requests that failed (refused, most often)
// while it counted.
type closedCounts struct {
	calls, work float64
	failed      int64
}

// closedLoop is calibrate, with the failures counted.
func closedLoop(ctx context.Context, req request, kind loadKind, workers int, warmup, d time.Duration) (closedCounts, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		nextID    atomic.Uint64
		counting  atomic.Bool
		completed atomic.Int64
		units     atomic.Int64
		failures  atomic.Int64
		failed    atomic.Int64 // while counting
		errMu     sync.Mutex
		firstErr  error
		wg        sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				id := nextID.Add(1)
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				err := req(cctx, id)
				ccancel()
				switch {
				case ctx.Err() != nil:
				case err != nil:
					failures.Add(1)
					if counting.Load() {
						failed.Add(1)
					}
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
				case counting.Load():
					completed.Add(1)
					units.Add(int64(kind.units(id)))
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
		return closedCounts{}, err
	}
	if completed.Load() == 0 {
		if firstErr != nil {
			return closedCounts{}, fmt.Errorf("calibration: no call succeeded (%d failed): %w", failures.Load(), firstErr)
		}
		return closedCounts{}, fmt.Errorf("calibration: no call completed in %v", d)
	}
	return closedCounts{calls: float64(completed.Load()) / elapsed.Seconds(), work: float64(units.Load()) / elapsed.Seconds(), failed: failed.Load()}, nil
}

// tracker records the requests of a run that succeeded, with when they
// answered, for what loadgen's counts do not tell: work done per kind of
// call, and goodput over time by completion.
type tracker struct {
	mu sync.Mutex
	ok []success
}

type success struct {
	id uint64
	at time.Time
}

// call returns req as a loadgen.CallFunc that records its successes.
func (t *tracker) call(req request) loadgen.CallFunc {
	return func(ctx context.Context) error {
		id, _ := loadgen.RequestID(ctx)
		err := req(ctx, id)
		if err == nil {
			now := time.Now()
			t.mu.Lock()
			t.ok = append(t.ok, success{id, now})
			t.mu.Unlock()
		}
		return err
	}
}

// successes returns the recorded successes in order of completion.
func (t *tracker) successes() []success {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Clone(t.ok)
	slices.SortFunc(out, func(a, b success) int { return a.at.Compare(b.at) })
	return out
}

// idRange returns the ids of the requests scheduled in phase name: (lo,
// hi]. loadgen numbers the requests it starts 1, 2, 3… in order of their
// schedule, phase after phase, and gives none to a request it drops, so
// each phase's ids follow the previous phase's, offered − dropped of them.
func idRange(res *loadgen.Result, name string) (lo, hi uint64) {
	for _, p := range res.Phases {
		n := uint64(p.Offered - p.Dropped)
		if p.Name == name {
			return lo, lo + n
		}
		lo += n
	}
	return 0, 0
}

// workIn returns the units of work of the requests scheduled in phase
// name: offered (those started) and succeeded.
func workIn(res *loadgen.Result, name string, kind loadKind, ok []success) (offered, succeeded int64) {
	lo, hi := idRange(res, name)
	for id := lo + 1; id <= hi; id++ {
		offered += int64(kind.units(id))
	}
	for _, s := range ok {
		if s.id > lo && s.id <= hi {
			succeeded += int64(kind.units(s.id))
		}
	}
	return offered, succeeded
}

// goodputWindow is the window over which timeTo measures goodput, and
// goodputStep how far apart the windows start.
const (
	goodputWindow = 500 * time.Millisecond
	goodputStep   = 50 * time.Millisecond
)

// timeTo returns how long after from the goodput reached rate calls/s:
// the end of the first window of goodputWindow, starting at from or a
// multiple of goodputStep after it and ending by until, in which at least
// rate × goodputWindow calls answered successfully (ok is in order of
// completion). ok is false when no such window exists.
func timeTo(ok []success, from, until time.Time, rate float64) (time.Duration, bool) {
	need := int(math.Ceil(rate * goodputWindow.Seconds()))
	for start := from; !start.Add(goodputWindow).After(until); start = start.Add(goodputStep) {
		end := start.Add(goodputWindow)
		if completedIn(ok, start, end) >= need {
			return end.Sub(from), true
		}
	}
	return 0, false
}

// completedIn returns how many of ok (in order of completion) answered in
// [from, until).
func completedIn(ok []success, from, until time.Time) int {
	i, _ := slices.BinarySearchFunc(ok, from, func(s success, t time.Time) int { return s.at.Compare(t) })
	j, _ := slices.BinarySearchFunc(ok, until, func(s success, t time.Time) int { return s.at.Compare(t) })
	return j - i
}

// unitsCompletedIn returns the units of work (kind.units) of the requests
// in ok, in order of completion, that succeeded in [from, until).
func unitsCompletedIn(ok []success, from, until time.Time, kind loadKind) int64 {
	i, _ := slices.BinarySearchFunc(ok, from, func(s success, t time.Time) int { return s.at.Compare(t) })
	j, _ := slices.BinarySearchFunc(ok, until, func(s success, t time.Time) int { return s.at.Compare(t) })
	var n int64
	for _, s := range ok[i:j] {
		n += int64(kind.units(s.id))
	}
	return n
}
