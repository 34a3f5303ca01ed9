package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/internal/loadgen"
)

// serverStartTimeout bounds the wait for a server's listening line.
const serverStartTimeout = 15 * time.Second

// placement is where the processes run: each server on one CPU with
// GOMAXPROCS=1, in a cgroup of one CPU when the machine allows, and the
// load generator (this process) on the other CPUs.
type placement struct {
	serverCPU int      // -1: servers not pinned
	taskset   string   // path of taskset; "" makes the server pin itself
	procs     []string // cgroup.procs files a server joins; nil: no cgroup
	note      string   // what the tables' notes say about it

	restore      func() // gives this process its CPUs back
	removeCgroup func()
}

// place pins this process to every allowed CPU but the first, which it
// leaves to the servers, and, if useCgroup, creates the servers' cgroup.
// What cannot be done is said in the note, never fatal.
func place(useCgroup bool) placement {
	p := placement{serverCPU: -1, restore: func() {}, removeCgroup: func() {}}
	var notes []string
	allowed, err := allowedCPUs()
	switch {
	case err != nil:
		notes = append(notes, fmt.Sprintf("servers not pinned (%v)", err))
	case len(allowed) < 2:
		notes = append(notes, fmt.Sprintf("servers not pinned (only CPU %v: servers and load generator share it)", allowed))
	default:
		server, rest := allowed[0], allowed[1:]
		if err := pinProcess(rest); err != nil {
			notes = append(notes, fmt.Sprintf("servers not pinned (%v)", err))
			break
		}
		p.serverCPU = server
		p.restore = func() { _ = pinProcess(allowed) }
		how := "sched_setaffinity"
		if path, err := exec.LookPath("taskset"); err == nil {
			p.taskset, how = path, "taskset"
		}
		notes = append(notes, fmt.Sprintf("each server alone on CPU %d (%s) with GOMAXPROCS=1, load generator on CPUs %v", server, how, rest))
	}
	if useCgroup {
		if _, err := exec.LookPath("sh"); err != nil {
			notes = append(notes, fmt.Sprintf("no cgroup of its own (%v)", err))
		} else if procs, remove, err := newCgroup(fmt.Sprintf("levee-peers-%d", os.Getpid())); err != nil {
			notes = append(notes, fmt.Sprintf("no cgroup of its own (%v): CPU-based peers read the CPU of the whole machine", err))
		} else {
			p.procs, p.removeCgroup = procs, remove
			notes = append(notes, "in a cgroup of its own with a quota of one CPU, as in a one-CPU container, so that every CPU signal reads the server's own CPU")
		}
	} else {
		notes = append(notes, "no cgroup of its own (-cgroup=false): CPU-based peers read the CPU of the whole machine")
	}
	p.note = strings.Join(notes, "; ")
	return p
}

// server is an inventory server running in a child process.
type server struct {
	cmd      *exec.Cmd
	addr     string
	line     string
	workIter int
	exited   chan struct{}
	waitErr  error
}

// startServer starts this binary as the server spec describes, placed as
// p says, and waits until it listens.
func startServer(ctx context.Context, p placement, spec serverSpec, stderr io.Writer) (*server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	spec.PinCPU = -1
	argv := []string{exe}
	switch {
	case p.serverCPU >= 0 && p.taskset != "":
		argv = []string{p.taskset, "-c", strconv.Itoa(p.serverCPU), exe}
	case p.serverCPU >= 0:
		spec.PinCPU = p.serverCPU
	}
	if len(p.procs) > 0 {
		// Join the cgroup before exec, so that the server's packages see
		// their cgroup from their first instruction (aegis reads it in
		// an init function).
		var script strings.Builder
		for _, f := range p.procs {
			fmt.Fprintf(&script, "echo $$ > '%s' && ", f)
		}
		script.WriteString(`exec "$@"`)
		argv = append([]string{"sh", "-c", script.String(), "sh"}, argv...)
	}
	env, err := spec.env()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", env)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s server: %w", spec.Protection, err)
	}
	s := &server{cmd: cmd, exited: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			if !sent && strings.HasPrefix(sc.Text(), listeningPrefix) {
				lines <- sc.Text()
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	timer := time.NewTimer(serverStartTimeout)
	defer timer.Stop()
	select {
	case line := <-lines:
		s.line = line
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "grpc="); ok {
				s.addr = v
			}
			if v, ok := strings.CutPrefix(f, "work-iterations="); ok {
				s.workIter, _ = strconv.Atoi(v)
			}
		}
		if s.addr == "" {
			s.stop()
			return nil, fmt.Errorf("%s server printed an unexpected line %q", spec.Protection, line)
		}
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("%s server exited before listening: %v", spec.Protection, s.waitErr)
	case <-timer.C:
		s.stop()
		return nil, fmt.Errorf("%s server did not listen within %v", spec.Protection, serverStartTimeout)
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
}

// stop asks the server to stop, kills it if it has not exited within a
// second, and waits for it to exit: the next server gets its CPU free.
func (s *server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		_ = s.cmd.Process.Kill()
	}
	select {
	case <-s.exited:
	case <-time.After(time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// client is a connection to a server.
type client struct {
	cc  *grpc.ClientConn
	inv inventoryv1.InventoryServiceClient
}

// dial connects to addr and waits until its health service answers
// SERVING.
func dial(ctx context.Context, addr string) (*client, error) {
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry()) // the generator counts outcomes, it does not retry
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, serverStartTimeout)
	defer cancel()
	hc := healthpb.NewHealthClient(cc)
	for {
		cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{Service: inventory.ServiceName})
		ccancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return &client{cc: cc, inv: inventoryv1.NewInventoryServiceClient(cc)}, nil
		}
		select {
		case <-ctx.Done():
			_ = cc.Close()
			return nil, fmt.Errorf("server %s not serving: %v", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *client) Close() { _ = c.cc.Close() }

// allocateCall allocates one unit for a fresh order per request, passing
// the server's pushback trailer on to the generator.
func (c *client) allocateCall(runID string) loadgen.CallFunc {
	skus := inventory.DefaultSKUs()
	return func(ctx context.Context) error {
		id, _ := loadgen.RequestID(ctx)
		var trailer metadata.MD
		_, err := c.inv.Allocate(ctx, &inventoryv1.AllocateRequest{
			Sku:      skus[id%uint64(len(skus))],
			Quantity: 1,
			OrderId:  runID + "-" + strconv.FormatUint(id, 10),
		}, grpc.Trailer(&trailer))
		return loadgen.PushbackFromTrailer(err, trailer)
	}
}

// stockCall reads the stock of a SKU.
func (c *client) stockCall() loadgen.CallFunc {
	skus := inventory.DefaultSKUs()
	return func(ctx context.Context) error {
		id, _ := loadgen.RequestID(ctx)
		_, err := c.inv.GetStock(ctx, &inventoryv1.GetStockRequest{Sku: skus[id%uint64(len(skus))]})
		return err
	}
}

// calibrate measures the Allocate calls/s the server completes
// closed-loop: workers callers each send the next call as soon as the
// previous one answered, for warmup (not counted) and then d.
func (c *client) calibrate(ctx context.Context, workers int, warmup, d time.Duration) (float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		counting  atomic.Bool
		completed atomic.Int64
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
			for i := 0; ctx.Err() == nil; i++ {
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := c.inv.Allocate(cctx, &inventoryv1.AllocateRequest{
					Sku: skus[i%len(skus)], Quantity: 1, OrderId: fmt.Sprintf("%s-%d-%d", runID, w, i),
				})
				ccancel()
				switch {
				case ctx.Err() != nil:
				case err != nil:
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
	sleep := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	err := sleep(warmup)
	counting.Store(true)
	start := time.Now()
	if err == nil {
		err = sleep(d)
	}
	counting.Store(false)
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	if err != nil {
		return 0, err
	}
	if completed.Load() == 0 {
		return 0, fmt.Errorf("calibration: no call succeeded in %v (first error: %v)", d, firstErr)
	}
	return float64(completed.Load()) / elapsed.Seconds(), nil
}
