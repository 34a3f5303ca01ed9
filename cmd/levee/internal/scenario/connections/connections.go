// Package connections is the connections scenario of `levee demo`: a
// flood of new connections from one client against the inventory service,
// unprotected and then protected by the connection guards (`levee serve
// -max-conns-per-peer`, beside the default cap where the process would run
// out of file descriptors), while clients connected before keep calling
// and new clients come and go.
package connections

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
	"github.com/levee-go/levee/internal/harness/stats"
	"github.com/levee-go/levee/internal/harness/target"
)

// Name is the scenario's name.
const Name = "connections"

// Defaults of the scenario's flags, and its fixed figures.
const (
	DefaultFlood   = 2000 // connections the flood keeps open
	DefaultFDLimit = 1024 // each server's limit on open files
	DefaultPerPeer = 100  // the protected server's cap per client
	// NewcomerRate is how many new clients a second connect, make one
	// GetStock and leave.
	NewcomerRate = 10
	// FloodFrom is the address the flood comes from; the other clients
	// come from 127.0.0.1.
	FloodFrom = "127.0.0.2"
	// floodDialers is how many goroutines open the flood's connections.
	floodDialers = 16
)

type config struct {
	flood, fdLimit, perPeer int
}

// New returns the connections scenario.
func New() scenario.Scenario {
	cfg := &config{}
	return scenario.Scenario{
		Name: Name,
		Description: fmt.Sprintf("a flood of new connections from one address (%s) that keeps\n-conn-flood of them open (default %d, HTTP/2 handshakes then silence) during the\nspike phase, against servers limited to -conn-fd-limit open files (default %d),\nwhile the load's connections call Allocate at the normal load and %d new clients\na second connect, call GetStock once and leave. The protected server caps\nconnections per client (-conn-per-peer, default %d). Reports both kinds of\nclients, the server's open files, goroutines and memory, and the connections\nit refused.",
			FloodFrom, DefaultFlood, DefaultFDLimit, NewcomerRate, DefaultPerPeer),
		Flags: func(fs *flag.FlagSet) func() error {
			fs.IntVar(&cfg.flood, "conn-flood", DefaultFlood, "with -scenario connections: the connections the flood keeps open")
			fs.IntVar(&cfg.fdLimit, "conn-fd-limit", DefaultFDLimit, "with -scenario connections: each server's limit on open files")
			fs.IntVar(&cfg.perPeer, "conn-per-peer", DefaultPerPeer, "with -scenario connections: the protected server's cap on one client's connections")
			return func() error {
				switch {
				case cfg.flood < 1 || cfg.flood > 100_000:
					return fmt.Errorf("-conn-flood must be in [1, 100000], got %d", cfg.flood)
				case cfg.fdLimit < 64:
					return fmt.Errorf("-conn-fd-limit must be at least 64, got %d", cfg.fdLimit)
				case cfg.perPeer < 1:
					return fmt.Errorf("-conn-per-peer must be at least 1, got %d", cfg.perPeer)
				}
				return nil
			}
		},
		Run: func(ctx context.Context, env scenario.Env, s scenario.Settings) (*scenario.Result, error) {
			return run(ctx, env, s, cfg)
		},
	}
}

// side is what one server's run left besides the loads' results.
type side struct {
	name                  string
	floodPeak             int64   // flood connections open at once, at most (client side)
	floodOpened           uint64  // flood connections the server answered
	floodCut              uint64  // flood connections the server reset or closed
	fdPeak, goroutinePeak float64 // highest samples
	rssPeak               float64 // MiB
	refused               float64 // connections the server refused (-1: not counted)
}

func run(ctx context.Context, env scenario.Env, s scenario.Settings, cfg *config) (*scenario.Result, error) {
	plan := scenario.PlanCPUs(env.Stderr)
	defer plan.Restore()
	fmt.Fprintf(env.Stderr, "levee demo: %s\n", plan.Note)
	from := FloodFrom
	if !canBind(from) {
		from = "127.0.0.1"
		fmt.Fprintf(env.Stderr, "levee demo: cannot connect from %s here: the flood comes from 127.0.0.1, as the other clients do\n", FloodFrom)
	}
	res := &scenario.Result{Capacity: s.Capacity, Measured: s.MeasureCapacity}
	common := []string{"-cpu-work", s.CPUWork.String(), "-fd-limit", strconv.Itoa(cfg.fdLimit)}
	var workIterations string
	unprot, uo, err := runServer(ctx, env, s, cfg, plan, from, "unprotected", func(srv *scenario.Server, t *target.Target) error {
		workIterations = srv.WorkIterations
		if !s.MeasureCapacity {
			return nil
		}
		fmt.Fprintf(env.Stderr, "levee demo: measuring capacity closed-loop for %v (%d callers)...\n", s.Calibrate, s.CalibrationWorkers)
		c, err := t.Calibrate(ctx, s.CalibrationWorkers, s.Calibrate/8, s.Calibrate)
		res.Capacity = c
		return err
	}, &res.Capacity, append([]string{"-unprotected"}, common...)...)
	if err != nil {
		return nil, err
	}
	res.WorkIterations = workIterations
	prot, po, err := runServer(ctx, env, s, cfg, plan, from, "protected", nil, &res.Capacity,
		append(common, "-work-iterations", workIterations, "-max-conns-per-peer", strconv.Itoa(cfg.perPeer))...)
	if err != nil {
		return nil, err
	}
	phases := s.SpikePhases(res.Capacity)
	res.Comparison = &report.Comparison{
		Title:         "levee demo: a flood of connections against the unprotected and the protected inventory service",
		Capacity:      res.Capacity,
		Runs:          append(unprot, prot...),
		MeasuresTitle: "The server's resources",
		Tables:        []report.Table{floodTable(uo, po, cfg)},
		Notes: []string{
			fmt.Sprintf("Capacity %.0f calls/s. The load's %d connections call Allocate at %.0f/s in every phase (%s arrivals, deadline %v); %d new clients a second each connect from 127.0.0.1, call GetStock once and leave.",
				res.Capacity, s.Load.Conns, phases[0].Rate, s.Load.Arrivals, s.Load.Deadline, NewcomerRate),
			fmt.Sprintf("In the %q phase (%v) a client at %s keeps %d connections open (the HTTP/2 preface and SETTINGS, then silence), opening another whenever one is closed. Each server may open %d files.",
				phases[1].Name, phases[1].Duration, from, cfg.flood, cfg.fdLimit),
			fmt.Sprintf("Protected server: levee serve (the preset) -max-conns-per-peer %d; its cap on all connections is the default, where it would run out of files. Unprotected: levee serve -unprotected.", cfg.perPeer),
			"Server: " + plan.Note + ". " + runtime.GOOS + "/" + runtime.GOARCH + ", " + strconv.Itoa(runtime.NumCPU()) + " CPUs.",
			"What to look at: the new clients served during the flood, the calls on the connections the server had, and the server's open files and goroutines.",
			"Generated " + time.Now().Format(time.RFC1123) + ".",
		},
	}
	return res, nil
}

// canBind reports whether this host can connect from addr.
func canBind(addr string) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// runServer starts a server with serveArgs, runs before (if any), then the
// phases with the flood in the second, and returns the runs of the load's
// connections and of the new clients.
func runServer(ctx context.Context, env scenario.Env, s scenario.Settings, cfg *config, plan scenario.CPUPlan, from, name string,
	before func(*scenario.Server, *target.Target) error, capacity *float64, serveArgs ...string) ([]report.Run, side, error) {
	o := side{name: name, refused: -1}
	srv, err := scenario.StartServer(ctx, env, plan.Server, serveArgs...)
	if err != nil {
		return nil, o, fmt.Errorf("%s server: %w", name, err)
	}
	defer srv.Stop(s.StopGrace)
	fmt.Fprintf(env.Stderr, "levee demo: %s server up: %s\n", name, srv.Line)
	t, err := target.Dial(ctx, srv.GRPCAddr, s.Load.Conns, env.ReadyTimeout)
	if err != nil {
		return nil, o, fmt.Errorf("%s server: %w", name, err)
	}
	defer t.Close()
	if before != nil {
		if err := before(srv, t); err != nil {
			return nil, o, fmt.Errorf("%s server: %w", name, err)
		}
	}
	phases := s.SpikePhases(*capacity)
	for i := range phases {
		phases[i].Rate = s.NormalLoad * *capacity
	}
	phases[1].Name = "flood"
	newPhases := make([]loadgen.Phase, len(phases))
	for i, p := range phases {
		newPhases[i] = loadgen.Phase{Name: p.Name, Duration: p.Duration, Rate: NewcomerRate}
	}
	fmt.Fprintf(env.Stderr, "levee demo: %s run: %v normal, %v flood of %d connections from %s, %v recovery; Allocate at %.0f/s, %d new clients/s\n",
		name, phases[0].Duration, phases[1].Duration, cfg.flood, from, phases[2].Duration, phases[0].Rate, NewcomerRate)

	sc := stats.NewClient(srv.HTTPAddr, stats.DefaultTimeout)
	defer sc.Close()
	watch := sc.Watch(time.Now().Add(-2*time.Second), 500*time.Millisecond)
	f := &flood{addr: srv.GRPCAddr, from: from, n: cfg.flood}
	fds := startSampler(200*time.Millisecond, srv, f.held.Load)
	floodCtx, stopFlood := context.WithCancel(ctx)
	defer stopFlood()
	floodDone := make(chan struct{})
	go func() {
		defer close(floodDone)
		select {
		case <-time.After(phases[0].Duration):
		case <-floodCtx.Done():
			return
		}
		fctx, cancel := context.WithTimeout(floodCtx, phases[1].Duration)
		defer cancel()
		f.run(fctx)
	}()
	var (
		newRes *loadgen.Result
		newErr error
		wg     sync.WaitGroup
	)
	gen, err := loadgen.New(newcomer(srv.GRPCAddr), newPhases, s.GeneratorOptions(env, name+" new clients")...)
	if err != nil {
		return nil, o, fmt.Errorf("%s new clients: %w", name, err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		newRes, newErr = gen.Run(ctx)
	}()
	run, err := t.Run(ctx, nil, s.Drain, phases, s.GeneratorOptions(env, name))
	wg.Wait()
	stopFlood()
	<-floodDone
	doc := watch.Stop(time.Second)
	fdSamples := fds.stop()
	if err != nil {
		return nil, o, fmt.Errorf("%s run: %w", name, err)
	}
	if newErr != nil {
		return nil, o, fmt.Errorf("%s new clients: %w", name, newErr)
	}
	run.Name = name
	run.Server = stats.ToReport(doc, run.Result.Start)
	run.Measures = measures(doc, fdSamples, f, run.Result.Start, &o)
	o.floodPeak, o.floodOpened, o.floodCut = f.peak.Load(), f.opened.Load(), f.cut.Load()
	fmt.Fprintf(env.Stderr, "levee demo: %s server: flood held %d connections at most (%d answered, %d cut), open files at most %.0f, goroutines at most %.0f\n",
		name, o.floodPeak, o.floodOpened, o.floodCut, o.fdPeak, o.goroutinePeak)
	return []report.Run{run, {Name: name + " new clients", Result: newRes}}, o, nil
}

// newcomer is a new client: it connects, calls GetStock once and leaves.
func newcomer(addr string) loadgen.CallFunc {
	sku := inventory.DefaultSKUs()[0]
	return func(ctx context.Context) error {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
		if err != nil {
			return err
		}
		defer cc.Close()
		_, err = inventoryv1.NewInventoryServiceClient(cc).GetStock(ctx, &inventoryv1.GetStockRequest{Sku: sku})
		return err
	}
}

// Measures of the runs.
const (
	measureFDs        = "server open files"
	measureGoroutines = "server goroutines"
	measureRSS        = "server memory MiB"
	measureFlood      = "flood connections open"
	measureRefused    = "connections refused"
)

// measures makes the run's measures from the server's samples, its open
// files sampled from outside and the flood's, and notes their peaks in o.
func measures(doc stats.Doc, fds []sample, f *flood, start time.Time, o *side) []report.Measure {
	files := report.Measure{Name: measureFDs, Level: true}
	held := report.Measure{Name: measureFlood, Level: true}
	rss := report.Measure{Name: measureRSS, Level: true, TableOnly: true}
	for _, s := range fds {
		at := s.at.Sub(start)
		files.Samples = append(files.Samples, report.MeasureSample{At: at, Value: float64(s.fds)})
		held.Samples = append(held.Samples, report.MeasureSample{At: at, Value: float64(s.flood)})
		o.fdPeak = max(o.fdPeak, float64(s.fds))
		if s.rss > 0 {
			mib := float64(s.rss) / (1 << 20)
			rss.Samples = append(rss.Samples, report.MeasureSample{At: at, Value: math.Round(mib*10) / 10})
			o.rssPeak = max(o.rssPeak, mib)
		}
	}
	gor := report.Measure{Name: measureGoroutines, Level: true}
	refused := report.Measure{Name: measureRefused, TableOnly: true}
	for _, s := range doc.Samples {
		at := time.Unix(0, s.Time).Sub(start)
		gor.Samples = append(gor.Samples, report.MeasureSample{At: at, Value: float64(s.Memory.Goroutines)})
		o.goroutinePeak = max(o.goroutinePeak, float64(s.Memory.Goroutines))
		if v, ok := s.Gauges["conns_refused"]; ok {
			refused.Samples = append(refused.Samples, report.MeasureSample{At: at, Value: v})
			o.refused = v
		}
	}
	ms := []report.Measure{files, held, gor, rss}
	if len(refused.Samples) > 0 {
		ms = append(ms, refused)
	}
	return ms
}

// floodTable sums up each server's side of the flood.
func floodTable(u, p side, cfg *config) report.Table {
	refused := func(o side) string {
		if o.refused < 0 {
			return "not counted"
		}
		return strconv.FormatFloat(o.refused, 'f', 0, 64)
	}
	return report.Table{
		Title:  fmt.Sprintf("the flood (%d connections from one address) against each server", cfg.flood),
		Header: []string{"", u.name, p.name},
		Rows: [][]string{
			{"flood connections open at once (client side), at most", strconv.FormatInt(u.floodPeak, 10), strconv.FormatInt(p.floodPeak, 10)},
			{"flood connections the server answered", strconv.FormatUint(u.floodOpened, 10), strconv.FormatUint(p.floodOpened, 10)},
			{"flood connections the server reset or closed", strconv.FormatUint(u.floodCut, 10), strconv.FormatUint(p.floodCut, 10)},
			{"connections the server refused", refused(u), refused(p)},
			{fmt.Sprintf("server open files, at most (limit %d)", cfg.fdLimit), fmt.Sprintf("%.0f", u.fdPeak), fmt.Sprintf("%.0f", p.fdPeak)},
			{"server goroutines, at most", fmt.Sprintf("%.0f", u.goroutinePeak), fmt.Sprintf("%.0f", p.goroutinePeak)},
			{"server memory MiB, at most", fmt.Sprintf("%.1f", u.rssPeak), fmt.Sprintf("%.1f", p.rssPeak)},
		},
	}
}

// sample is the server's open files and memory, and the flood's
// connections, at an instant.
type sample struct {
	at    time.Time
	fds   int
	rss   uint64
	flood int64
}

type sampler struct {
	stopc chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	got   []sample
}

// startSampler reads the server's open files and memory (from this
// process: a server out of files cannot read its own) and the flood's
// connections every interval.
func startSampler(every time.Duration, srv *scenario.Server, flood func() int64) *sampler {
	s := &sampler{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			v := sample{at: time.Now(), fds: srv.FDs(), rss: srv.RSS(), flood: flood()}
			s.mu.Lock()
			s.got = append(s.got, v)
			s.mu.Unlock()
			select {
			case <-s.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() []sample {
	close(s.stopc)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}

// preface is what a flood connection sends: the HTTP/2 client preface and
// an empty SETTINGS frame, so that the server builds a whole transport
// for it.
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// flood keeps n connections from from to addr open until its context
// ends, opening another whenever one is closed.
type flood struct {
	addr, from string
	n          int

	held   atomic.Int64
	peak   atomic.Int64
	opened atomic.Uint64 // connections the server answered (sent a byte)
	cut    atomic.Uint64 // connections the server reset or closed
}

func (f *flood) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range floodDialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.dialer(ctx, &wg)
		}()
	}
	<-ctx.Done()
	wg.Wait()
}

// dialer opens connections while fewer than n are held; each is held by
// a goroutine of its own until the server closes it or ctx ends.
func (f *flood) dialer(ctx context.Context, wg *sync.WaitGroup) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(f.from)}, Timeout: time.Second}
	for ctx.Err() == nil {
		// Take a place among the n before dialing, so that the dialers
		// together never hold more.
		n := f.held.Add(1)
		if n > int64(f.n) {
			f.held.Add(-1)
			pause(ctx, 10*time.Millisecond)
			continue
		}
		c, err := d.DialContext(ctx, "tcp", f.addr)
		if err == nil {
			if _, err = c.Write([]byte(preface)); err != nil {
				c.Close()
				f.cut.Add(1)
			}
		}
		if err != nil {
			f.held.Add(-1)
			pause(ctx, 10*time.Millisecond)
			continue
		}
		for p := f.peak.Load(); n > p && !f.peak.CompareAndSwap(p, n); p = f.peak.Load() {
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.hold(ctx, c)
		}()
	}
}

// hold reads c until the server closes it or ctx ends.
func (f *flood) hold(ctx context.Context, c net.Conn) {
	defer f.held.Add(-1)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	defer c.Close()
	buf := make([]byte, 512)
	answered := false
	for {
		n, err := c.Read(buf)
		if n > 0 && !answered {
			answered = true
			f.opened.Add(1)
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				f.cut.Add(1)
				pause(ctx, 5*time.Millisecond) // a reset dialer does not spin
			}
			return
		}
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
