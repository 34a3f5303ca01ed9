// Package fleet is the fleet scenario of `levee demo`: three `levee serve`
// replicas share one tenant's limit of L calls/s through a real Redis
// (levee serve -redis), the tenant's load of about 2L skewed across them
// 80/10/10 and then 10/10/80, with Redis killed for a window mid-run and
// restarted on the same port; once with every call asking Redis (direct
// mode) and once with leases. It reports each replica's run and the
// fleet's admitted rate per window against L, and the commands Redis ran
// against the calls.
package fleet

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
	"github.com/levee-go/levee/internal/harness/stats"
	"github.com/levee-go/levee/internal/harness/target"
	"github.com/levee-go/levee/internal/redisproc"
)

// Name is the scenario's name.
const Name = "fleet"

// The scenario's workload: Replicas servers, each Allocate burning CPUWork,
// one tenant (Tenant, named by TenantHeader) offering LoadFactor × the
// fleet's limit.
const (
	Replicas     = 3
	CPUWork      = 100 * time.Microsecond
	TenantHeader = "x-tenant-id"
	Tenant       = "acme"
	LoadFactor   = 2.0
	// BurstShare is the shared bucket's size, as seconds of the limit: a
	// quarter of a second lets each of the replicas lease up to L ÷ 12 at
	// once, so that Redis sees a small fraction of the calls, and adds at
	// most 2.5% to a 10 s window.
	BurstShare = 0.25
)

// Defaults of the scenario's flags.
const (
	DefaultRate   = 500
	DefaultWindow = 10 * time.Second
)

// Bounds the report checks the fleet's admitted rate against, as shares
// of the limit: each window with Redis up, and the outage window.
const (
	BoundUp     = 0.05
	BoundOutage = 0.20
)

// FleetMeasure is the name of the measure, on every run of a pass, that
// counts the calls the whole fleet admitted: the fleet's row of the
// report's tables.
const FleetMeasure = "fleet admitted"

// Phase names.
const (
	PhaseSkew   = "skew"
	PhaseShift  = "shift"
	PhaseOutage = "outage"
)

// config is what the scenario's flags set.
type config struct {
	redis         string
	rate          float64
	window        time.Duration
	balance       bool
	balanceWindow time.Duration
	balanceLoad   float64
	balanceORCA   string // the balance replicas' -orca-capacity; "": serve's default
	balanceSlow   string // SlowLatency or SlowPool
}

// New returns the fleet scenario, with its flags -redis, -fleet-rate and
// -fleet-window.
func New() scenario.Scenario {
	c := &config{rate: DefaultRate, window: DefaultWindow, balanceWindow: DefaultBalanceWindow, balanceLoad: BalanceLoad, balanceSlow: SlowLatency}
	return scenario.Scenario{
		Name: Name,
		Description: fmt.Sprintf("%d `levee serve -redis` replicas share one tenant's limit of\n-fleet-rate calls/s through a redis-server (started from PATH, or -redis ADDR);\n"+
			"the tenant offers %gx that, split 80/10/10 then 10/10/80, and Redis is killed\nfor a window and restarted; in direct mode, then with leases. Reports each\n"+
			"replica, the fleet's admitted rate per window against the limit, and Redis's\ncommands against the calls.", Replicas, LoadFactor),
		Flags: c.flags,
		Run: func(ctx context.Context, env scenario.Env, s scenario.Settings) (*scenario.Result, error) {
			return c.run(ctx, env, s)
		},
	}
}

func (c *config) flags(fs *flag.FlagSet) func() error {
	fs.StringVar(&c.redis, "redis", "", "fleet scenario: use the Redis at this `host:port` instead of starting redis-server (it is then not killed mid-run)")
	fs.Float64Var(&c.rate, "fleet-rate", c.rate, "fleet scenario: the tenant's limit in `calls/s`, shared by the replicas")
	fs.DurationVar(&c.window, "fleet-window", c.window, "fleet scenario: length of each phase (the windows the fleet's rate is judged over)")
	fs.BoolVar(&c.balance, "fleet-balance", false, "fleet scenario: then three I/O-bound replicas, one with a 2x slower database, and a client at -fleet-balance-load of what they can serve on round_robin, then on weighted_round_robin (ORCA reports), two -fleet-balance-window phases each")
	fs.DurationVar(&c.balanceWindow, "fleet-balance-window", c.balanceWindow, "fleet scenario: length of each phase of -fleet-balance (settling, then measured)")
	fs.Float64Var(&c.balanceLoad, "fleet-balance-load", c.balanceLoad, "fleet scenario: the load of -fleet-balance, as a `share` of what its three replicas can serve")
	fs.StringVar(&c.balanceORCA, "fleet-balance-orca", "", "fleet scenario: the -fleet-balance replicas' `levee serve -orca-capacity` (cpus, run-limit or a number; pool: each its -db-conns; empty: serve's default)")
	fs.StringVar(&c.balanceSlow, "fleet-balance-slow", c.balanceSlow, "fleet scenario: how -fleet-balance's third replica serves half what the others do: `latency` (its database takes twice as long) or pool (half the connections)")
	return func() error {
		var errs []error
		if !(c.rate >= 1) || c.rate > 100000 {
			errs = append(errs, fmt.Errorf("-fleet-rate must be in [1, 100000] calls/s, got %v", c.rate))
		}
		if c.window < 100*time.Millisecond {
			errs = append(errs, fmt.Errorf("-fleet-window must be >= 100ms, got %v", c.window))
		}
		if c.window > scenario.MaxSchedule/3 { // three windows a pass
			errs = append(errs, fmt.Errorf("-fleet-window must be at most %v, got %v", scenario.MaxSchedule/3, c.window))
		}
		if o := c.balanceORCA; o != "" && o != "cpus" && o != "run-limit" && o != ORCAPool {
			if n, err := strconv.Atoi(o); err != nil || n < 1 {
				errs = append(errs, fmt.Errorf("-fleet-balance-orca must be cpus, run-limit, %s or a number >= 1, got %q", ORCAPool, o))
			}
		}
		if c.balanceSlow != SlowLatency && c.balanceSlow != SlowPool {
			errs = append(errs, fmt.Errorf("-fleet-balance-slow must be %s or %s, got %q", SlowLatency, SlowPool, c.balanceSlow))
		}
		if !(c.balanceLoad > 0) || c.balanceLoad > 2 {
			errs = append(errs, fmt.Errorf("-fleet-balance-load must be in (0, 2], got %v", c.balanceLoad))
		}
		if c.balanceWindow < time.Second || c.balanceWindow > 10*time.Minute {
			errs = append(errs, fmt.Errorf("-fleet-balance-window must be in [1s, 10m], got %v", c.balanceWindow))
		}
		return errors.Join(errs...)
	}
}

// pass is one run of the three replicas: direct mode or leases.
type pass struct {
	name   string
	leases bool
	// outage is the split of the outage window. Each replica's fallback
	// is its share of L, learned from its share of the calls before the
	// kill (the shift window's 10/10/80): a split that changes during the
	// outage leaves the fallbacks short where the load moved to.
	outage [Replicas]float64
}

var (
	skewSplit  = [Replicas]float64{0.8, 0.1, 0.1}
	shiftSplit = [Replicas]float64{0.1, 0.1, 0.8}
	evenSplit  = [Replicas]float64{1.0 / 3, 1.0 / 3, 1.0 / 3}
)

// evenAfterShift is the share of L the fleet can reach in an outage that
// spreads the load evenly after the shift window's split: each replica is
// capped at its learned share (at least a quarter of an even one), or its
// load.
func evenAfterShift() float64 {
	var sum float64
	for i := range Replicas {
		share := max(shiftSplit[i], 0.25/Replicas)
		sum += min(LoadFactor*evenSplit[i], share)
	}
	return sum
}

// passes: the direct pass keeps the shifted split through the outage
// (the shares learned fit), the leased pass spreads the load evenly, as a
// balancer might (they do not).
var passes = []pass{
	{name: "direct", outage: shiftSplit},
	{name: "leased", leases: true, outage: evenSplit},
}

// redis is the scenario's Redis: a process it owns, or an address given.
type redis struct {
	addr string
	proc *redisproc.Process // nil when given with -redis
	dir  string
}

func (c *config) startRedis(env scenario.Env) (*redis, error) {
	if c.redis != "" {
		if err := redisproc.Ping(c.redis); err != nil {
			return nil, fmt.Errorf("-redis %s does not answer PING: %v", c.redis, err)
		}
		return &redis{addr: c.redis}, nil
	}
	bin, err := redisproc.Binary()
	if err != nil {
		return nil, fmt.Errorf("the fleet scenario needs Redis: %s, or give -redis host:port", redisproc.Install)
	}
	dir, err := os.MkdirTemp("", "levee-fleet-redis-")
	if err != nil {
		return nil, err
	}
	p, err := redisproc.Start(bin, dir, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	fmt.Fprintf(env.Stderr, "levee demo: redis-server up on %s\n", p.Addr())
	return &redis{addr: p.Addr(), proc: p, dir: dir}, nil
}

func (r *redis) stop() {
	if r.proc != nil {
		r.proc.Stop()
		os.RemoveAll(r.dir)
	}
}

// fleetKeys matches the keys of the fleet limit of `levee serve -redis`:
// redislimit's default prefix, then the limit's name.
const fleetKeys = "levee:fleet:*"

// cleanSlate gives a pass no bucket, no heartbeat and no command counted.
// The demo's own redis-server it empties (FLUSHALL) and resets (CONFIG
// RESETSTAT). A Redis given with -redis may hold others' data: it deletes
// only the fleet limit's keys, and returns the commands counted so far,
// for the pass to subtract.
func (r *redis) cleanSlate() (baseline int64, err error) {
	if r.proc != nil {
		for _, cmd := range [][]string{{"FLUSHALL"}, {"CONFIG", "RESETSTAT"}} {
			if _, err := redisproc.Do(r.addr, cmd...); err != nil {
				return 0, fmt.Errorf("redis %s: %v", strings.Join(cmd, " "), err)
			}
		}
		return 0, nil
	}
	for cursor := "0"; ; {
		v, err := redisproc.Do(r.addr, "SCAN", cursor, "MATCH", fleetKeys, "COUNT", "1000")
		if err != nil {
			return 0, fmt.Errorf("redis SCAN: %v", err)
		}
		// The reply, flattened: the next cursor, then the keys.
		parts := strings.Split(v, "\n")
		cursor = parts[0]
		if keys := slices.DeleteFunc(parts[1:], func(k string) bool { return k == "" }); len(keys) > 0 {
			if _, err := redisproc.Do(r.addr, append([]string{"DEL"}, keys...)...); err != nil {
				return 0, fmt.Errorf("redis DEL: %v", err)
			}
		}
		if cursor == "0" {
			break
		}
	}
	n, err := r.commands()
	if err != nil {
		return 0, fmt.Errorf("redis INFO: %v", err)
	}
	return n, nil
}

// scriptCommands are the commands redislimit's scripts run: INFO
// commandstats counts them again beside the EVALSHA that ran them, and
// redislimit never sends them itself.
var scriptCommands = map[string]bool{"get": true, "set": true, "pexpire": true, "time": true, "zadd": true, "zcard": true, "zrem": true, "zremrangebyscore": true}

// commands returns the commands the replicas sent Redis since its start
// or the last CONFIG RESETSTAT: INFO commandstats, less the commands run
// inside scripts (scriptCommands) and the demo's own (INFO, CONFIG,
// FLUSHALL).
func (r *redis) commands() (int64, error) {
	v, err := redisproc.Do(r.addr, "INFO", "commandstats")
	if err != nil {
		return 0, err
	}
	var n int64
	for _, line := range strings.Split(v, "\n") {
		k, stat, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(k, "cmdstat_") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(k, "cmdstat_"), "|")
		if scriptCommands[name] || name == "info" || name == "config" || name == "flushall" {
			continue
		}
		for _, kv := range strings.Split(stat, ",") {
			if calls, ok := strings.CutPrefix(kv, "calls="); ok {
				c, err := strconv.ParseInt(calls, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO commandstats: %q: %v", line, err)
				}
				n += c
			}
		}
	}
	return n, nil
}

// passResult is what one pass measured.
type passResult struct {
	pass
	runs     []report.Run
	commands int64         // Redis commands during the pass
	recovery time.Duration // restart → every replica back on Redis; 0: no outage
	iters    string
}

func (c *config) run(ctx context.Context, env scenario.Env, s scenario.Settings) (*scenario.Result, error) {
	rd, err := c.startRedis(env)
	if err != nil {
		return nil, err
	}
	defer rd.stop()
	plan := scenario.PlanCPUs(env.Stderr)
	defer plan.Restore()
	fmt.Fprintf(env.Stderr, "levee demo: %s\n", plan.Note)

	var results []passResult
	for _, p := range passes {
		r, err := c.runPass(ctx, env, s, plan, rd, p)
		if err != nil {
			return nil, fmt.Errorf("%s pass: %w", p.name, err)
		}
		results = append(results, r)
	}
	var bs []balanced
	if c.balance {
		if bs, err = c.balanceRun(ctx, env, s, plan, rd); err != nil {
			return nil, fmt.Errorf("balance pass: %w", err)
		}
	}
	res := &scenario.Result{Capacity: c.rate, WorkIterations: results[0].iters}
	res.Comparison = &report.Comparison{
		Title:    fmt.Sprintf("levee demo: %d replicas sharing one tenant's limit of %.0f calls/s through Redis", Replicas, c.rate),
		Capacity: c.rate,
		Notes:    c.notes(s, plan, rd, results),
	}
	if len(bs) > 0 { // after the passes' own notes
		n := 1 + len(results)
		res.Comparison.Notes = append(res.Comparison.Notes[:n:n], append([]string{c.balanceNote(bs)}, res.Comparison.Notes[n:]...)...)
		res.Comparison.Tables = append(res.Comparison.Tables, c.balanceTable(bs))
	}
	for _, r := range results {
		res.Comparison.Runs = append(res.Comparison.Runs, r.runs...)
	}
	return res, nil
}

// burst is the shared bucket's size.
func (c *config) burst() int { return max(1, int(BurstShare*c.rate)) }

// phases are replica i's phases in pass p: its share of the tenant's load
// in each window.
func (c *config) phases(p pass, i int, outage bool) []loadgen.Phase {
	load := LoadFactor * c.rate
	ph := []loadgen.Phase{
		{Name: PhaseSkew, Duration: c.window, Rate: load * skewSplit[i]},
		{Name: PhaseShift, Duration: c.window, Rate: load * shiftSplit[i]},
	}
	if outage {
		ph = append(ph, loadgen.Phase{Name: PhaseOutage, Duration: c.window, Rate: load * p.outage[i]})
	}
	return ph
}

func (c *config) runPass(ctx context.Context, env scenario.Env, s scenario.Settings, plan scenario.CPUPlan, rd *redis, p pass) (passResult, error) {
	out := passResult{pass: p}
	baseline, err := rd.cleanSlate()
	if err != nil {
		return out, err
	}
	args := []string{"-cpu-work", CPUWork.String(), "-redis", rd.addr, "-fleet-rate", strconv.FormatFloat(c.rate, 'f', -1, 64),
		"-fleet-burst", strconv.Itoa(c.burst()), "-tenant-header", TenantHeader}
	if p.leases {
		args = append(args, "-fleet-leases")
	}
	servers := make([]*scenario.Server, 0, Replicas)
	defer func() {
		for _, srv := range servers {
			srv.Stop(s.StopGrace)
		}
	}()
	targets := make([]*target.Target, 0, Replicas)
	defer func() {
		for _, t := range targets {
			t.Close()
		}
	}()
	for i := range Replicas {
		srv, err := scenario.StartServer(ctx, env, plan.Server, args...)
		if err != nil {
			return out, fmt.Errorf("replica %d: %w", i+1, err)
		}
		servers = append(servers, srv)
		fmt.Fprintf(env.Stderr, "levee demo: %s replica %d up: %s\n", p.name, i+1, srv.Line)
		t, err := target.Dial(ctx, srv.GRPCAddr, s.Load.Conns, env.ReadyTimeout)
		if err != nil {
			return out, fmt.Errorf("replica %d: %w", i+1, err)
		}
		t.SetMetadata(TenantHeader, Tenant)
		targets = append(targets, t)
	}
	out.iters = servers[0].WorkIterations
	outage := rd.proc != nil

	var (
		wg      sync.WaitGroup
		runs    = make([]report.Run, Replicas)
		errs    = make([]error, Replicas)
		killErr error
		before  int64 // commands before the kill
	)
	start := time.Now()
	if outage {
		wg.Go(func() {
			before, out.recovery, killErr = c.outage(ctx, env, rd, servers, start)
		})
	}
	for i := range Replicas {
		wg.Go(func() {
			sc := stats.NewClient(servers[i].HTTPAddr, stats.DefaultTimeout)
			defer sc.Close()
			name := fmt.Sprintf("%s r%d", p.name, i+1)
			runs[i], errs[i] = targets[i].Run(ctx, sc, s.Drain, c.phases(p, i, outage), s.GeneratorOptions(env, name))
			runs[i].Name = name
		})
	}
	wg.Wait()
	if err := errors.Join(append(errs, killErr)...); err != nil {
		return out, err
	}
	after, err := rd.commands()
	if err != nil {
		return out, fmt.Errorf("redis INFO: %v", err)
	}
	out.commands = before + after - baseline
	fleet := fleetMeasure(runs)
	for i := range runs {
		runs[i].Measures = []report.Measure{fleet}
	}
	out.runs = runs
	return out, nil
}

// outage kills Redis when the outage window starts (two windows after
// start), restarts it on the same port a window later, and then waits for
// every replica to be back on Redis (levee_fleet_redis_up 1). It returns
// the commands Redis ran before the kill and how long the replicas took.
func (c *config) outage(ctx context.Context, env scenario.Env, rd *redis, servers []*scenario.Server, start time.Time) (before int64, recovery time.Duration, err error) {
	if !sleepUntil(ctx, start.Add(2*c.window)) {
		return 0, 0, ctx.Err()
	}
	if before, err = rd.commands(); err != nil {
		return 0, 0, fmt.Errorf("redis INFO: %v", err)
	}
	rd.proc.Stop()
	fmt.Fprintf(env.Stderr, "levee demo: redis-server killed for %v\n", c.window)
	if !sleepUntil(ctx, start.Add(3*c.window)) {
		return before, 0, ctx.Err()
	}
	if err := rd.proc.Restart(); err != nil {
		return before, 0, err
	}
	restarted := time.Now()
	fmt.Fprintf(env.Stderr, "levee demo: redis-server restarted on %s\n", rd.addr)
	client := &http.Client{Timeout: time.Second}
	for {
		up := 0
		for _, srv := range servers {
			if redisUp(client, srv.HTTPAddr) {
				up++
			}
		}
		if up == len(servers) {
			return before, time.Since(restarted), nil
		}
		if time.Since(restarted) > 10*time.Second {
			return before, 0, fmt.Errorf("%d of %d replicas back on Redis 10s after its restart", up, len(servers))
		}
		if !sleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
			return before, 0, ctx.Err()
		}
	}
}

// redisUp reads levee_fleet_redis_up from a server's /metrics.
func redisUp(client *http.Client, addr string) bool {
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return false
	}
	return strings.Contains(string(b), "\nlevee_fleet_redis_up{name=\"fleet\"} 1\n")
}

// sleepUntil waits until t, or returns false when ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// fleetMeasure is the calls the replicas of a pass admitted together,
// counted up second by second (the runs start within moments of each
// other; their seconds are matched by position).
func fleetMeasure(runs []report.Run) report.Measure {
	m := report.Measure{Name: FleetMeasure, Samples: []report.MeasureSample{{At: 0, Value: 0}}}
	n := len(runs[0].Result.Seconds)
	for _, r := range runs[1:] {
		n = min(n, len(r.Result.Seconds))
	}
	var total float64
	for k := range n {
		for _, r := range runs {
			total += float64(r.Result.Seconds[k].Succeeded)
		}
		sec := runs[0].Result.Seconds[k]
		m.Samples = append(m.Samples, report.MeasureSample{At: sec.Offset + sec.Length, Value: total})
	}
	return m
}

// Window is the fleet's admitted rate over one phase of a pass.
type Window struct {
	Pass, Phase string
	// Rate is the calls/s the replicas admitted together; Min and Max
	// are the lowest and highest of its seconds.
	Rate, Min, Max float64
	// Error is (Rate - limit) ÷ limit.
	Error float64
}

// Windows returns the fleet's admitted rate in each phase of the runs of
// a pass (one run per replica), against limit.
func Windows(passName string, runs []report.Run, limit float64) []Window {
	var out []Window
	for j, ph := range runs[0].Result.Phases {
		w := Window{Pass: passName, Phase: ph.Name, Min: math.Inf(1), Max: math.Inf(-1)}
		var admitted int64
		for _, r := range runs {
			admitted += r.Result.Phases[j].Succeeded
		}
		w.Rate = float64(admitted) / ph.Duration.Seconds()
		w.Error = (w.Rate - limit) / limit
		from, to := ph.Offset, ph.Offset+ph.Duration
		for k, sec := range runs[0].Result.Seconds {
			if sec.Offset < from || sec.Offset >= to || sec.Length < time.Second {
				continue
			}
			var n int64
			for _, r := range runs {
				if k < len(r.Result.Seconds) {
					n += r.Result.Seconds[k].Succeeded
				}
			}
			w.Min, w.Max = min(w.Min, float64(n)), max(w.Max, float64(n))
		}
		if math.IsInf(w.Min, 0) {
			w.Min, w.Max = w.Rate, w.Rate
		}
		out = append(out, w)
	}
	return out
}

// notes are the report's notes: the fleet's rate per window against the
// bounds, Redis's commands against the calls, the recovery.
func (c *config) notes(s scenario.Settings, plan scenario.CPUPlan, rd *redis, results []passResult) []string {
	var lines []string
	head := make([]string, 0, len(results)*3)
	for _, r := range results {
		for _, w := range Windows(r.name, r.runs, c.rate) {
			bound := BoundUp
			if w.Phase == PhaseOutage {
				bound = BoundOutage
			}
			verdict := "within"
			if math.Abs(w.Error) > bound {
				verdict = "OUTSIDE"
			}
			head = append(head, fmt.Sprintf("%s %s %.0f/s (%+.1f%%, %s ±%.0f%%; seconds %.0f..%.0f)", w.Pass, w.Phase, w.Rate, 100*w.Error, verdict, 100*bound, w.Min, w.Max))
		}
	}
	lines = append(lines, fmt.Sprintf("Fleet admitted rate per %v window against the limit L = %.0f/s: %s.", c.window, c.rate, strings.Join(head, "; ")))
	for _, r := range results {
		// The calls of the windows when Redis was up: in the outage it
		// sees none.
		var offered, admitted int64
		for _, run := range r.runs {
			for _, ph := range run.Result.Phases {
				if ph.Name != PhaseOutage {
					offered += ph.Offered
					admitted += ph.Succeeded
				}
			}
		}
		per := func(n int64) float64 { return float64(n) / float64(max(r.commands, 1)) }
		line := fmt.Sprintf("%s mode: Redis ran %d commands while %d calls were offered and %d admitted with Redis up (%.1f offered and %.1f admitted calls per command; INFO commandstats: the commands the replicas sent, heartbeats and probes included, not those their scripts ran nor the demo's own).",
			r.name, r.commands, offered, admitted, per(offered), per(admitted))
		if r.recovery > 0 {
			line += fmt.Sprintf(" After Redis's restart every replica was back on the shared limit within %v.", r.recovery.Round(time.Millisecond))
		}
		lines = append(lines, line)
	}
	redisNote := "Redis " + rd.addr + " given with -redis: not killed, no outage window."
	if rd.proc != nil {
		redisNote = fmt.Sprintf("redis-server started on %s, killed (SIGKILL) at the start of the outage window and restarted on the same port at its end, empty. "+
			"While it is down each replica decides locally at its share of L, learned from its share of the fleet's calls before the kill (10/10/80): "+
			"the direct pass keeps that split, so the shares fit and the fleet can reach L; the leased pass spreads the load evenly, as a balancer might, "+
			"where the light replicas' shares cap them and the fleet can reach only about %.0f%% of L.",
			rd.addr, 100*evenAfterShift())
	}
	lines = append(lines,
		fmt.Sprintf("%d replicas of levee serve -redis %s -fleet-rate %.0f -fleet-burst %d -tenant-header %s (-fleet-leases in the leased pass), each Allocate burning %v; one tenant offering %gx L, split 80/10/10 (%s), then 10/10/80 (%s), then the outage split (%s); %s arrivals, deadline %v.",
			Replicas, rd.addr, c.rate, c.burst(), TenantHeader, CPUWork, LoadFactor, PhaseSkew, PhaseShift, PhaseOutage, s.Load.Arrivals, s.Load.Deadline),
		redisNote,
		"Servers: "+plan.Note+". "+runtime.GOOS+"/"+runtime.GOARCH+", "+strconv.Itoa(runtime.NumCPU())+" CPUs.",
		"Generated "+time.Now().Format(time.RFC1123)+".",
	)
	return lines
}
