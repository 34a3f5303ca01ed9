package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/connectguard"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/examples/inventory"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/httpguard"
	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/protect"
	"github.com/levee-go/levee/queuedelay"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/runlimit"
)

// leveeProtection is levee's entry in the comparison: what a user gets in
// one call, protect.New(), told no number.
func leveeProtection() (opts []grpc.ServerOption, stop func(), err error) {
	p, stop, err := leveePreset()
	if err != nil {
		return nil, stop, err
	}
	return p.ServerOptions(), stop, nil
}

// leveeConnect is the same preset in front of connect-go: connectguard's
// middleware and interceptor on the preset's engine.
func leveeConnect() (mw func(http.Handler) http.Handler, opts []connect.HandlerOption, stop func(), err error) {
	p, stop, err := leveePreset()
	if err != nil {
		return nil, nil, stop, err
	}
	g, err := connectguard.New(p.Engine())
	if err != nil {
		stop()
		return nil, nil, func() {}, err
	}
	return g.Middleware, []connect.HandlerOption{connect.WithInterceptors(g.Interceptor())}, stop, nil
}

// leveeHTTP is the same preset in front of plain net/http handlers:
// httpguard's middleware on the preset's engine, each JSON route's flow
// named after the gRPC method it serves (as `levee serve -transport
// http` names them), so that the preset learns Allocate and GetStock as
// it does on grpc-go.
func leveeHTTP() (mw func(http.Handler) http.Handler, stop func(), err error) {
	p, stop, err := leveePreset()
	if err != nil {
		return nil, stop, err
	}
	g, err := httpguard.New(p.Engine(), httpguard.WithFlow(jsonFlow))
	if err != nil {
		stop()
		return nil, func() {}, err
	}
	return g.Middleware, stop, nil
}

// leveePreset returns protect.New() and the function that stops it (and
// its trace, with traceEnv).
func leveePreset() (*protect.Server, func(), error) {
	p, err := protect.New()
	if err != nil {
		return nil, func() {}, err
	}
	if os.Getenv(traceEnv) == "" {
		return p, p.Stop, nil
	}
	loaded := allocateMethod
	if s, err := serverSpecFromEnv(); err == nil && s.Feed {
		loaded = feedMethod
	}
	done := make(chan struct{})
	traced := make(chan struct{})
	go func() {
		defer close(traced)
		tracePreset(p, loaded, os.Stderr, done)
	}()
	return p, func() { close(done); <-traced; p.Stop() }, nil
}

// traceEnv, when set, makes the preset's server print what its run
// limit and guards decided every traceEvery on stderr, which the
// benchmark passes on: why the preset refused, or left its CPU idle.
const traceEnv = "LEVEE_PEERS_TRACE"

const traceEvery = 250 * time.Millisecond

// tracePreset prints p's state every traceEvery until done is closed:
// the run limit's limit, calls running and waiting, and what changed
// since the last line (overruns, refusals by evidence, each guard's
// refusals), with the CPU's utilisation and what the run limit learned
// of the loaded method (its flow is created at the first line if no call
// came yet).
func tracePreset(p *protect.Server, loaded string, w io.Writer, done <-chan struct{}) {
	t := time.NewTicker(traceEvery)
	defer t.Stop()
	start := time.Now()
	var last runlimit.Stats
	lastRefused, lastAdmitted, lastReason := map[string]uint64{}, map[string]uint64{}, map[string]uint64{}
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		rl := p.RunLimit()
		st := rl.Stats()
		line := fmt.Sprintf("trace %6.2fs limit %d running %d waiting %d overruns +%d unrefused +%d slacked +%d refused-on cpu +%d standing +%d spike +%d lane +%d overrun +%d",
			time.Since(start).Seconds(), st.Limit, st.Running, st.Waiting, st.Overruns-last.Overruns, st.Unrefused-last.Unrefused, st.Slacked-last.Slacked,
			st.RefusedOn.CPU-last.RefusedOn.CPU, st.RefusedOn.Standing-last.RefusedOn.Standing, st.RefusedOn.Spike-last.RefusedOn.Spike,
			st.RefusedOn.Lane-last.RefusedOn.Lane, st.RefusedOn.Overrun-last.RefusedOn.Overrun)
		if m := p.CPU(); m != nil {
			line += fmt.Sprintf(" cpu %.2f", m.Utilization())
		}
		line += fmt.Sprintf(" none %v slack %v", (st.NoneRunning - last.NoneRunning).Round(100*time.Microsecond), st.Slack.Round(100*time.Microsecond))
		f := rl.Flow(loaded)
		line += fmt.Sprintf(" svc %v base %v target %v admissible %v", f.ServiceTime().Round(10*time.Microsecond), f.Baseline().Round(10*time.Microsecond), f.QueueTarget().Round(10*time.Microsecond), f.Admissible())
		for _, g := range p.Guard().Stats() {
			k := g.Rule + "/" + g.Guard
			if d := g.Refused - lastRefused[k]; d > 0 {
				line += fmt.Sprintf(" %s +%d", k, d)
			}
			if d := g.Admitted - lastAdmitted[k]; d > 0 && g.Guard == "run" {
				line += fmt.Sprintf(" (admitted +%d)", d)
			}
			lastRefused[k], lastAdmitted[k] = g.Refused, g.Admitted
		}
		line += refusalReasons(p.Engine().RefusalCounts(), lastReason)
		line += learnerMoves(last, st)
		line += reads.take()
		fmt.Fprintln(w, line)
		last = st
	}
}

// refusalReasons names the refusals counted since last (updated), by
// guard, reason and evidence (run:RUN_QUEUE_FULL/spike: refused at
// admission, run:RUN_WAIT_EXPIRED/spike: after a wait for a turn):
// " reasons" and each with its count, or "" if there was none.
func refusalReasons(counts []decide.RefusalCount, last map[string]uint64) string {
	var s string
	for _, c := range counts {
		k := c.Guard + ":" + string(c.Reason)
		if c.Evidence != admission.EvidenceNone {
			k += "/" + c.Evidence.String()
		}
		if d := c.Count - last[k]; d > 0 {
			s += fmt.Sprintf(" %s+%d", k, d)
		}
		last[k] = c.Count
	}
	if s == "" {
		return ""
	}
	return " reasons" + s
}

// learnerMoves names the run limit's learner moves between a and b
// (docs/runlimit-learner.md), those that happened only: " moves" and
// each with its count, or "" if there was none.
func learnerMoves(a, b runlimit.Stats) string {
	var s string
	add := func(name string, from, to uint64) {
		if to > from {
			s += fmt.Sprintf(" %s+%d", name, to-from)
		}
	}
	probe := func(kind string, from, to runlimit.ProbeStats) {
		add(kind+"-started", from.Started, to.Started)
		add(kind+"-kept", from.Kept, to.Kept)
		add(kind+"-undone", from.Undone, to.Undone)
		add(kind+"-rebased", from.Rebased, to.Rebased)
		add(kind+"-abandoned", from.Abandoned, to.Abandoned)
	}
	probe("baseline", a.ProbeBaseline, b.ProbeBaseline)
	probe("cpu", a.ProbeCPU, b.ProbeCPU)
	probe("lag", a.ProbeLag, b.ProbeLag)
	add("overran", a.Overran, b.Overran)
	add("grow", a.Grows, b.Grows)
	add("shrink", a.Shrinks, b.Shrinks)
	if s == "" {
		return ""
	}
	return " moves" + s
}

// leveeBucket is the cheapest refusal levee has: one token bucket at
// fraction of the measured capacity, in the transport's tap, on the
// loaded method (Allocate, or the Feed stream) as x/time/rate's entry is.
func leveeBucket(fraction float64) (opts []grpc.ServerOption, stop func(), err error) {
	rate, err := capacityShare(fraction)
	if err != nil {
		return nil, func() {}, err
	}
	return tapBucket(rate, max(1, int(rate/10)), allocateMethod, feedMethod)
}

// capacityShare is fraction of the capacity this server was measured at.
func capacityShare(fraction float64) (float64, error) {
	s, err := serverSpecFromEnv()
	if err != nil {
		return 0, err
	}
	if !(s.Capacity > 0) {
		return 0, fmt.Errorf("bucket: capacity must be > 0, got %v", s.Capacity)
	}
	return fraction * s.Capacity, nil
}

// leveeRefuse refuses every call of method in grpc-go's transport tap, with
// the bucket of leveeBucket at rate 0, and lets every other method through.
func leveeRefuse(method string) (opts []grpc.ServerOption, stop func(), err error) {
	return tapBucket(0, 1, method)
}

// tapBucket is one token bucket of rate calls/s and burst in grpc-go's
// transport tap, on methods only.
func tapBucket(rate float64, burst int, methods ...string) (opts []grpc.ServerOption, stop func(), err error) {
	rules, err := bucketRule(rate, burst, methods...)
	if err != nil {
		return nil, func() {}, err
	}
	guard, err := grpcguard.New(rules)
	if err != nil {
		return nil, func() {}, err
	}
	return guard.ServerOptions(), func() {}, nil
}

// bucketRule is the one rule of the bucket entries: a token bucket of
// rate calls/s and burst on methods only.
func bucketRule(rate float64, burst int, methods ...string) ([]decide.Rule, error) {
	bucket, err := ratelimit.NewLimiter(ratelimit.Limit(rate), burst)
	if err != nil {
		return nil, err
	}
	return []decide.Rule{{
		Name:    "loaded",
		Methods: methods,
		Guards:  []admission.Guard{ratelimit.NewGuard("bucket", bucket)},
	}}, nil
}

// connectRefuse refuses every call of method in connectguard's
// middleware, before connect-go reads the body, with the bucket of
// leveeBucket at rate 0, and lets every other method through: the
// connect-go counterpart of leveeRefuse.
func connectRefuse(method string) (mw func(http.Handler) http.Handler, opts []connect.HandlerOption, stop func(), err error) {
	rules, err := bucketRule(0, 1, method)
	if err != nil {
		return nil, nil, func() {}, err
	}
	e, err := decide.New(rules)
	if err != nil {
		return nil, nil, func() {}, err
	}
	g, err := connectguard.New(e)
	if err != nil {
		return nil, nil, func() {}, err
	}
	return g.Middleware, []connect.HandlerOption{connect.WithInterceptors(g.Interceptor())}, func() {}, nil
}

// httpRefuse refuses every request of the JSON route serving method in
// httpguard's middleware, with the bucket of leveeBucket at rate 0, and
// lets every other route through: the net/http counterpart of
// leveeRefuse.
func httpRefuse(method string) (mw func(http.Handler) http.Handler, stop func(), err error) {
	rules, err := bucketRule(0, 1, method)
	if err != nil {
		return nil, func() {}, err
	}
	e, err := decide.New(rules)
	if err != nil {
		return nil, func() {}, err
	}
	g, err := httpguard.New(e, httpguard.WithFlow(jsonFlow))
	if err != nil {
		return nil, func() {}, err
	}
	return g.Middleware, func() {}, nil
}

// jsonFlow names a JSON route's flow after the gRPC method it serves, as
// `levee serve -transport http` names them.
func jsonFlow(r *http.Request) string {
	if m, ok := inventory.HTTPMethods[r.Pattern]; ok {
		return m
	}
	return r.Pattern
}

// leveeStatic is `levee serve -recipe static` (cmd/levee/policy.go, the
// fixed chain the preset replaced), for comparison: it needs two numbers the preset learns, the
// server's capacity in Allocate calls/s and the CPU time of one Allocate,
// and takes them from the description of the server this process runs
// (serverSpecFromEnv), which is what the benchmark measured and configured.
func leveeStatic() (opts []grpc.ServerOption, stop func(), err error) {
	s, err := serverSpecFromEnv()
	if err != nil {
		return nil, func() {}, err
	}
	capacity, cpuWork := s.Capacity, s.CPUWork
	if !(capacity > 0) {
		return nil, func() {}, fmt.Errorf("levee: capacity must be > 0, got %v", capacity)
	}

	// Allocate, at the transport, cheapest first: calls whose deadline
	// cannot be met; calls that queued too long (CoDel, target 4 service
	// times); a global token bucket at the capacity, scaled down by the
	// CPU shedder; a per-client bucket at the capacity; a bulkhead of
	// 4 × GOMAXPROCS in flight of which GOMAXPROCS run at a time, in FIFO
	// order. Every other method: the deadline check only.
	procs := runtime.GOMAXPROCS(0)
	burst := max(1, int(capacity/10)) // 100 ms of capacity
	dl, err := deadline.New()
	if err != nil {
		return nil, func() {}, err
	}
	queue, err := queuedelay.New(max(5*time.Millisecond, 4*cpuWork), max(100*time.Millisecond, 20*cpuWork))
	if err != nil {
		return nil, func() {}, err
	}
	global, err := ratelimit.NewLimiter(ratelimit.Limit(capacity), burst)
	if err != nil {
		return nil, func() {}, err
	}
	slots, err := bulkhead.New(4 * procs)
	if err != nil {
		return nil, func() {}, err
	}
	run, err := bulkhead.New(procs, bulkhead.WithQueue(4*procs))
	if err != nil {
		return nil, func() {}, err
	}
	shed, err := loadshed.New(loadshed.AIMD{}, []loadshed.Target{global})
	if err != nil {
		return nil, func() {}, err
	}
	perClient, err := ratelimit.NewKeyed(ratelimit.Limit(capacity), burst)
	if err != nil {
		return nil, func() {}, err
	}
	retry := time.Duration(float64(time.Second) / capacity) // about one call's slot
	guard, err := grpcguard.New([]decide.Rule{
		{
			Name:    "allocate",
			Methods: []string{allocateMethod},
			Key:     decide.PeerKey(),
			Guards: []admission.Guard{
				dl,
				queue,
				ratelimit.NewGuard("global", global),
				ratelimit.NewKeyedGuard("client", perClient),
				bulkhead.NewGuard("inflight", slots, retry),
				bulkhead.NewRunGuard("run", run, retry),
			},
		},
		{Name: "default", Guards: []admission.Guard{dl}},
	})
	if err != nil {
		perClient.Close()
		return nil, func() {}, err
	}

	// The CPU shedder (AIMD) lowers the global bucket's scale only while
	// the CPU is saturated and calls stand in a queue.
	var monitor *cpu.Monitor
	if src, err := cpu.Detect(); err == nil {
		if mon, err := cpu.NewMonitor(src); err == nil {
			monitor = mon
			_ = shed.Follow(queuedCPU{mon: mon, queue: queue}, cpu.DefaultInterval) // fails only for an interval <= 0
		}
	}
	stop = func() {
		shed.Close()
		if monitor != nil {
			monitor.Close()
		}
		perClient.Close()
	}
	return guard.ServerOptions(), stop, nil
}

// queuedCPU is the shedder's signal: the CPU's utilisation, saturated only
// while the queue guard sees a standing queue.
type queuedCPU struct {
	mon   *cpu.Monitor
	queue *queuedelay.Guard
}

func (s queuedCPU) Utilization() float64 { return s.mon.Utilization() }
func (s queuedCPU) Saturated() bool      { return s.mon.Saturated() && s.queue.Overloaded() }

// plainBucket is leveeBucket's bucket in a tap of its own that refuses
// with a bare status (refused), as failsafe-go's tap does: no RetryInfo,
// no ErrorInfo.
func plainBucket(fraction float64) (opts []grpc.ServerOption, stop func(), err error) {
	rate, err := capacityShare(fraction)
	if err != nil {
		return nil, func() {}, err
	}
	bucket, err := ratelimit.NewLimiter(ratelimit.Limit(rate), max(1, int(rate/10)))
	if err != nil {
		return nil, func() {}, err
	}
	tapFn := func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if info.FullMethodName != allocateMethod && info.FullMethodName != feedMethod {
			return ctx, nil
		}
		if !bucket.Allow() {
			return ctx, refused("bucket", errors.New("rate limited"))
		}
		return ctx, nil
	}
	return []grpc.ServerOption{grpc.InTapHandle(tapFn)}, func() {}, nil
}
