package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

// -peak: what each protection costs a server that is not overloaded, on
// a server whose handler costs next to nothing (peakWork SHA-256 rounds),
// so that what a protection adds to each call shows: the calls/s it
// completes closed-loop at a fixed concurrency, and the CPU it uses at a
// fixed rate well under its capacity. Each protection runs on a fresh
// server in each round, the protections' order rotated from round to
// round; the table gives medians, and ratios to the unprotected server
// of the same round.

// peakDefaultProtections are -peak's protections when -protections is
// not given: the unprotected server first (the ratios' base), then the
// issue's three.
const peakDefaultProtections = "none,levee,failsafe,ratelimit-never"

// peakWork is the SHA-256 rounds of one Allocate on -peak's server: one,
// a near-free handler.
const peakWork = 1

// peakRound is what -peak measured of one protection in one round.
type peakRound struct {
	// Closed is the Allocate calls/s completed closed-loop, ClosedFailed
	// the calls that failed (refused) while it was measured.
	Closed       float64 `json:"closed_per_s"`
	ClosedFailed int64   `json:"closed_failed"`
	// ClosedCPU is the server's CPU in the closed loop, % of one CPU,
	// over the same window: below GOMAXPROCS×100 when the server's
	// processors sat partly idle, so that a lower Closed comes from
	// calls held back rather than from CPU spent on each.
	ClosedCPU float64 `json:"closed_cpu_pct"`
	// ClosedBusy is the whole machine's busy CPUs in the same window, %
	// of one CPU (the server, the load generator and anything else):
	// near the CPU count when the closed loop is bound by CPU alone.
	ClosedBusy float64 `json:"closed_busy_pct"`
	// ClosedReads and ClosedWrites are the server's read and write
	// system calls per call completed in the same window: how many
	// calls the transport batched into each.
	ClosedReads  float64 `json:"closed_reads_per_call"`
	ClosedWrites float64 `json:"closed_writes_per_call"`
	// CPU is the server's CPU at the fixed rate, % of one CPU, over the
	// window; Samples the same second by second.
	CPU     float64   `json:"cpu_pct"`
	Samples []float64 `json:"cpu_samples_pct"`
	// Offered and Refused are the open loop's calls and refusals over
	// its whole run (warm-up included).
	Offered int64 `json:"offered"`
	Refused int64 `json:"refused"`
}

// peakResult is what -peak measured of one protection over the rounds.
type peakResult struct {
	Protection string      `json:"protection"`
	Label      string      `json:"label"`
	Rounds     []peakRound `json:"rounds"`
	// ClosedRatio and CPURatio are each round's figure over the
	// unprotected server's of the same round, when it ran.
	ClosedRatio []float64 `json:"closed_ratio"`
	CPURatio    []float64 `json:"cpu_ratio"`
	// ClosedCostRatio is each round's CPU per call in the closed loop
	// over the unprotected server's of the same round.
	ClosedCostRatio []float64 `json:"closed_cost_ratio"`
}

// perCall is the CPU per call in µs of a server that used cpu % of one
// CPU while it completed calls per second (0 for none).
func perCall(cpu, calls float64) float64 {
	if calls <= 0 || cpu < 0 {
		return 0
	}
	return cpu / 100 * 1e6 / calls
}

// runPeak runs -peak: cfg.peakRounds rounds of every protection, each on
// a fresh server, and writes the table.
func runPeak(ctx context.Context, cfg *config, pl *placement, stdout, stderr io.Writer) ([]peakResult, error) {
	sc := scenario{name: "peak", server: serverSpec{WorkIterations: peakWork, Cores: cfg.peakCores}, calWorkers: cfg.peakCallers}
	where := pl.enter(sc.server.cores())
	// The protections that need a capacity (the ratelimit and static
	// entries) get the fixed rate's: -peak measures no capacity.
	m := measured{capacity: cfg.peakRate, work: cfg.peakRate, workIterations: peakWork}
	res := make([]peakResult, len(cfg.protections))
	for i, p := range cfg.protections {
		res[i] = peakResult{Protection: p.name, Label: p.label}
	}
	for round := range cfg.peakRounds {
		byName := map[string]peakRound{}
		for k := range cfg.protections {
			i := (k + round) % len(cfg.protections)
			p := cfg.protections[i]
			r, err := peakOne(ctx, cfg, pl, sc, m, p, stderr)
			if err != nil {
				return nil, fmt.Errorf("-peak: %s, round %d: %w", p.name, round+1, err)
			}
			fmt.Fprintf(stderr, "peers: -peak round %d: %s: closed loop %.0f calls/s (%d failed), server CPU %.1f%% (%.1f µs a call, %.2f reads and %.2f writes a call), machine busy %.0f%%; at %g calls/s, server CPU %.1f%% (%d of %d refused)\n",
				round+1, p.name, r.Closed, r.ClosedFailed, r.ClosedCPU, perCall(r.ClosedCPU, r.Closed), r.ClosedReads, r.ClosedWrites, r.ClosedBusy, cfg.peakRate, r.CPU, r.Refused, r.Offered)
			res[i].Rounds = append(res[i].Rounds, r)
			byName[p.name] = r
		}
		addRatios(res, byName)
	}
	writePeak(stdout, cfg, where, res)
	return res, nil
}

// addRatios adds to each of res the ratios of its figures in one round,
// round (by protection name), to the unprotected server's, when it ran.
func addRatios(res []peakResult, round map[string]peakRound) {
	base, ok := round["none"]
	if !ok {
		return
	}
	for i := range res {
		r := round[res[i].Protection]
		if base.Closed > 0 {
			res[i].ClosedRatio = append(res[i].ClosedRatio, r.Closed/base.Closed)
		}
		if b, c := perCall(base.ClosedCPU, base.Closed), perCall(r.ClosedCPU, r.Closed); b > 0 && c > 0 {
			res[i].ClosedCostRatio = append(res[i].ClosedCostRatio, c/b)
		}
		// 0: under a tick in a tiny window; -1: not read (the server
		// gone, or no /proc), which as a ratio of -0.1 would pull the
		// median down, towards the target.
		if base.CPU > 0 && r.CPU > 0 {
			res[i].CPURatio = append(res[i].CPURatio, r.CPU/base.CPU)
		}
	}
}

// peakOne measures protection p on a fresh server: closed-loop, then at
// the fixed rate.
func peakOne(ctx context.Context, cfg *config, pl *placement, sc scenario, m measured, p protection, stderr io.Writer) (peakRound, error) {
	srv, alloc, stop, err := startProtected(ctx, pl, sc, m, p, stderr)
	if err != nil {
		return peakRound{}, err
	}
	defer stop()
	closedID, openID := peakRunIDs()
	r, closeR, err := dialRequester(sc.load, alloc, srv.addr, closedID)
	if err != nil {
		return peakRound{}, err
	}
	defer closeR()
	warm := cfg.peakWindow / 4
	closedWin := make(chan serverWindow, 1)
	go func() { closedWin <- measureWindow(ctx, srv.cmd.Process.Pid, pl.allowed, warm, cfg.peakWindow) }()
	cl, err := closedLoop(ctx, r.request(), sc.load, cfg.peakCallers, warm, cfg.peakWindow)
	w := <-closedWin
	if err != nil {
		return peakRound{}, err
	}
	out := peakRound{Closed: cl.calls, ClosedFailed: cl.failed, ClosedCPU: w.cpu, ClosedBusy: w.busy}
	if n := cl.calls * cfg.peakWindow.Seconds(); n > 0 && w.reads >= 0 {
		out.ClosedReads, out.ClosedWrites = float64(w.reads)/n, float64(w.writes)/n
	}
	gen, err := loadgen.New(alloc.allocateCall(openID),
		[]loadgen.Phase{{Name: "fixed", Duration: warm + cfg.peakWindow + 100*time.Millisecond, Rate: cfg.peakRate}},
		loadgen.WithArrivals(loadgen.Poisson), loadgen.WithDeadline(cfg.deadline), loadgen.WithSeed(5))
	if err != nil {
		return peakRound{}, err
	}
	done := runInBackground(ctx, gen)
	var wg sync.WaitGroup
	wg.Go(func() { out.Samples = cpuSamples(ctx, srv.cmd.Process.Pid, warm, cfg.peakWindow, time.Second) })
	out.CPU, _ = windowCPU(ctx, srv.cmd.Process.Pid, nil, warm, cfg.peakWindow)
	g := <-done
	wg.Wait()
	if g.err != nil {
		return peakRound{}, g.err
	}
	// A server that died is not a cheap one: its CPU stops counting (or
	// reads -1) and its calls fail, none of which fails loadgen's Run,
	// nor the closed loop once one call has succeeded.
	select {
	case <-srv.exited:
		return peakRound{}, fmt.Errorf("%s server exited during the measurement: %v", p.name, srv.waitErr)
	default:
	}
	ph := phaseNamed(g.res, "fixed")
	out.Offered, out.Refused = ph.Offered, ph.RefusedTotal()
	return out, nil
}

// peakRunIDs returns the prefixes of the order ids of the closed loop and
// of the open loop on one server: distinct (each loop numbers its calls
// from 1, and an order id seen before is a replay, which the inventory
// answers without applying it), and as long for every protection. They
// held the protection's name, so that one protection's calls carried
// longer ids than another's, on the wire both ways and in the server's
// memory of orders: ratelimit-never's 11 bytes more than none's, in the
// open loop 51 bytes against 40, a larger allocation size class.
func peakRunIDs() (closed, open string) {
	now := time.Now().UnixNano()
	return fmt.Sprintf("peak-c-%d", now), fmt.Sprintf("peak-o-%d", now)
}

// serverWindow is what measureWindow read of a server over a window:
// its CPU and the machine's busy CPUs (% of one CPU, -1 where unknown)
// and its read and write system calls (-1 where unknown).
type serverWindow struct {
	cpu, busy     float64
	reads, writes int64
}

// measureWindow reads process pid's CPU and system calls and the busy
// time of cpus (all of the machine's that matter) from start to
// start+d after the call.
func measureWindow(ctx context.Context, pid int, cpus []int, start, d time.Duration) serverWindow {
	out := serverWindow{cpu: -1, busy: -1, reads: -1, writes: -1}
	t0 := time.Now()
	if !sleepUntil(ctx, t0.Add(start)) {
		return out
	}
	c0, cerr := processCPU(pid)
	r0, w0, ioerr := processSyscalls(pid)
	b0, berr := cpusBusy(cpus)
	if !sleepUntil(ctx, t0.Add(start+d)) {
		return out
	}
	if c1, err := processCPU(pid); err == nil && cerr == nil {
		out.cpu = pct(float64(c1-c0), float64(d))
	}
	if r1, w1, err := processSyscalls(pid); err == nil && ioerr == nil {
		out.reads, out.writes = r1-r0, w1-w0
	}
	if b1, err := cpusBusy(cpus); err == nil && berr == nil && len(cpus) > 0 {
		out.busy = pct(float64(b1-b0), float64(d))
	}
	return out
}

// cpuSamples returns process pid's CPU, % of one CPU, in each period of
// every from start to start+d after the call (-1 where it could not be
// read).
func cpuSamples(ctx context.Context, pid int, start, d, every time.Duration) []float64 {
	t0 := time.Now()
	var out []float64
	if !sleepUntil(ctx, t0.Add(start)) {
		return out
	}
	last, lerr := processCPU(pid)
	for at := every; at <= d; at += every {
		if !sleepUntil(ctx, t0.Add(start+at)) {
			return out
		}
		c, err := processCPU(pid)
		if err != nil || lerr != nil {
			out = append(out, -1)
		} else {
			out = append(out, pct(float64(c-last), float64(every)))
		}
		last, lerr = c, err
	}
	return out
}

// median returns the median of vs (the mean of the middle two of an
// even count), or 0 for none. Not the upper one of an even count: that
// is the larger of two rounds' calls/s ratio and of their CPU ratio, so
// that -peak-rounds 2, 4, 20… read the closed loop's ratio high (towards
// its target) and the CPU's high (away from its).
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[n/2]
}

// unevenOrder is what the table says of the protections' order when
// rounds rotations of n protections do not put each in each place
// equally often ("" when they do): the machine drifts over a run, and
// the first place of the first round is the run's first server.
func unevenOrder(rounds, n int) string {
	if n < 2 || rounds%n == 0 {
		return ""
	}
	return fmt.Sprintf(" (unevenly: %d rounds of %d protections do not put each in each place equally often; a multiple of %d rounds does)", rounds, n, n)
}

// writePeak writes -peak's table.
func writePeak(w io.Writer, cfg *config, where string, rs []peakResult) {
	fmt.Fprintf(w, "### What protection costs a server that is not overloaded\n\n")
	fmt.Fprintf(w, "Allocate on a server with a near-free handler (%d SHA-256 round), GOMAXPROCS=%d (%s): closed loop at %d callers, then open loop (Poisson) at %g calls/s, each for %v after a warm-up of %v; every protection on a fresh server in each of %d rounds, their order rotated%s. Medians over the rounds; ratios to the unprotected server of the same round (their median).\n\n",
		peakWork, max(1, cfg.peakCores), where, cfg.peakCallers, cfg.peakRate, cfg.peakWindow, cfg.peakWindow/4, cfg.peakRounds, unevenOrder(cfg.peakRounds, len(rs)))
	fmt.Fprintf(w, "| protection | closed loop, %d callers: calls/s (ratio) | refused closed-loop | server CPU at %g calls/s, %% of one (ratio) | CPU per call (µs) | CPU each second (%%, min–max) | refused at %g/s | rounds: calls/s | rounds: CPU %% | closed loop: server CPU, %% of one | closed loop: server CPU per call, µs (ratio) | closed loop: server reads / writes per call | closed loop: machine busy, %% of one |\n",
		cfg.peakCallers, cfg.peakRate, cfg.peakRate)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		var closed, closedCPU, cost, reads, writes, busy, cpu, failed, refused []float64
		var lo, hi float64 = -1, -1
		for _, x := range r.Rounds {
			closed = append(closed, x.Closed)
			closedCPU = append(closedCPU, x.ClosedCPU)
			cost = append(cost, perCall(x.ClosedCPU, x.Closed))
			reads, writes, busy = append(reads, x.ClosedReads), append(writes, x.ClosedWrites), append(busy, x.ClosedBusy)
			cpu = append(cpu, x.CPU)
			failed = append(failed, float64(x.ClosedFailed))
			refused = append(refused, float64(x.Refused))
			for _, s := range x.Samples {
				if s < 0 {
					continue
				}
				if lo < 0 || s < lo {
					lo = s
				}
				hi = max(hi, s)
			}
		}
		ratio := func(vs []float64) string {
			if len(vs) == 0 {
				return ""
			}
			return fmt.Sprintf(" (%.2f)", median(vs))
		}
		seconds := "–"
		if lo >= 0 {
			seconds = fmt.Sprintf("%.0f–%.0f", lo, hi)
		}
		fmt.Fprintf(w, "| %s | %.0f%s | %.0f | %.1f%s | %.1f | %s | %.0f | %s | %s | %.1f | %.1f%s | %.2f / %.2f | %.0f |\n",
			r.Label, median(closed), ratio(r.ClosedRatio), median(failed), median(cpu), ratio(r.CPURatio),
			median(cpu)/100*1e6/cfg.peakRate, seconds, median(refused), list(closed, 0), list(cpu, 1),
			median(closedCPU), median(cost), ratio(r.ClosedCostRatio), median(reads), median(writes), median(busy))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "The server's CPU is read from /proc/PID/stat (to the kernel's tick, 10 ms: ±%.2f%% over a window of %v).\n\n",
		pct(float64(20*time.Millisecond), float64(cfg.peakWindow)), cfg.peakWindow)
}
