package metrics

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/retrybudget"
	"github.com/levee-go/levee/runlimit"
	"github.com/levee-go/levee/throttle"
)

// The collectors below read their guard when Collect runs, and only then:
// each metric is a const metric built at scrape time from the guard's own
// atomics and snapshots. Nothing here runs on a request path.

// nameLabel is the label carrying the name a guard was registered under.
const nameLabel = "name"

// newDesc returns the descriptor of a metric; name, when not empty, is the
// value of the constant name label.
func newDesc(fq, help, name string, variable ...string) *prometheus.Desc {
	var constant prometheus.Labels
	if name != "" {
		constant = prometheus.Labels{nameLabel: name}
	}
	return prometheus.NewDesc(fq, help, variable, constant)
}

// emit sends one const metric, or an invalid metric carrying the error (a
// label value that is not valid UTF-8, say), which fails the scrape with a
// message naming the metric instead of panicking.
func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	emit(ch, d, prometheus.GaugeValue, v, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	emit(ch, d, prometheus.CounterValue, float64(v), labels...)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// describe sends every descriptor in ds.
func describe(ch chan<- *prometheus.Desc, ds ...*prometheus.Desc) {
	for _, d := range ds {
		ch <- d
	}
}

// ---- decisions of a server or client

// Result label values of levee_decisions_total.
const (
	resultAdmitted      = "admitted"
	resultRefused       = "refused"
	resultShadowRefused = "shadow_refused"
)

// decisionsCollector exports the decision counts of a grpcguard.Server or
// Client.
type decisionsCollector struct {
	stats     func() []admission.GuardStats
	starts    func() uint64 // nil for a Client
	decisions *prometheus.Desc
	startsD   *prometheus.Desc
	left      tapLeftovers // nil unless the server counts them
	now       func() time.Time
	leftD     *prometheus.Desc
	leftTotal *prometheus.Desc
	refusals  RefusalSource // nil unless the server counts them
	refusalsD *prometheus.Desc
}

func newServerCollector(s ServerSource) *decisionsCollector {
	return &decisionsCollector{
		stats:  s.Stats,
		starts: s.HandlerStarts,
		decisions: newDesc("levee_decisions_total",
			"Decisions of each guard of each grpcguard rule, by result: admitted, refused, or shadow_refused (would have refused, let through by a shadow rule).",
			"", "rule", "guard", "result"),
		startsD: newDesc("levee_handler_starts_total",
			"Handlers started on calls guarded by the grpcguard Server.", ""),
	}
}

// withLeftovers adds the tap refusals still pending in grpc-go when s
// counts them.
func (c *decisionsCollector) withLeftovers(s any, now func() time.Time) *decisionsCollector {
	if l, ok := s.(tapLeftovers); ok {
		c.left, c.now = l, now
		c.leftD = newDesc("levee_tap_refusals_pending",
			"Calls refused in the transport's tap whose deadline has not passed: grpc-go keeps each one's deadline timer and context (about 300 B) until then (docs/memory.md).", "")
		c.leftTotal = newDesc("levee_tap_refusals_total", "Calls with a deadline refused in the transport's tap.", "")
	}
	return c
}

// withRefusals adds the refusals by guard, reason and evidence when s
// counts them.
func (c *decisionsCollector) withRefusals(s any) *decisionsCollector {
	if r, ok := s.(RefusalSource); ok {
		c.refusals = r
		c.refusalsD = newDesc("levee_refusals_total",
			"Calls refused, by the refusing guard, the reason their google.rpc.ErrorInfo carries (RUN_QUEUE_FULL, CPU_OVERLOADED, SUSTAINED_OVERLOAD, ...) and the evidence of overload they were refused on (cpu, overrun, standing, lane, spike, memory, limit, none, ...).",
			"", "guard", "reason", "evidence")
	}
	return c
}

func newClientCollector(c StatsSource) *decisionsCollector {
	return &decisionsCollector{
		stats: c.Stats,
		decisions: newDesc("levee_client_decisions_total",
			"Decisions of each guard of a grpcguard Client, by (target, method) pair in the rule label (\"target method\") and result: admitted, refused, or shadow_refused.",
			"", "rule", "guard", "result"),
	}
}

func (c *decisionsCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.decisions)
	if c.starts != nil {
		describe(ch, c.startsD)
	}
	if c.left != nil {
		describe(ch, c.leftD, c.leftTotal)
	}
	if c.refusals != nil {
		describe(ch, c.refusalsD)
	}
}

func (c *decisionsCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ rule, guard string }
	stats := c.stats()
	// Two guards of one rule may share a name (grpcguard does not forbid
	// it); their series would collide, so they are summed.
	sums := make(map[key]*admission.GuardStats, len(stats))
	order := make([]key, 0, len(stats))
	for i := range stats {
		st := &stats[i]
		k := key{st.Rule, st.Guard}
		if sum, ok := sums[k]; ok {
			sum.Admitted += st.Admitted
			sum.Refused += st.Refused
			sum.ShadowRefused += st.ShadowRefused
			continue
		}
		sums[k] = st
		order = append(order, k)
	}
	for _, k := range order {
		st := sums[k]
		counter(ch, c.decisions, st.Admitted, k.rule, k.guard, resultAdmitted)
		counter(ch, c.decisions, st.Refused, k.rule, k.guard, resultRefused)
		counter(ch, c.decisions, st.ShadowRefused, k.rule, k.guard, resultShadowRefused)
	}
	if c.starts != nil {
		counter(ch, c.startsD, c.starts())
	}
	if c.left != nil {
		pending, total := c.left.TapLeftovers(c.now())
		gauge(ch, c.leftD, float64(pending))
		counter(ch, c.leftTotal, total)
	}
	if c.refusals != nil {
		for _, r := range c.refusals.RefusalCounts() {
			counter(ch, c.refusalsD, r.Count, r.Guard, string(r.Reason), r.Evidence.String())
		}
	}
}

// ---- cpu.Monitor

type cpuCollector struct {
	m *cpu.Monitor

	info, utilization, raw, saturated, threshold *prometheus.Desc
	samples, late, errors                        *prometheus.Desc
	allowance, quota                             *prometheus.Desc
	periods, throttledPeriods, throttledSeconds  *prometheus.Desc
	pressure                                     *prometheus.Desc
}

func newCPUCollector(m *cpu.Monitor) *cpuCollector {
	return &cpuCollector{
		m: m,
		info: newDesc("levee_cpu_info",
			"Always 1; the source label says what the CPU monitor measures (\"manual\" for a monitor fed by Update).", "", "source"),
		utilization: newDesc("levee_cpu_utilization",
			"Smoothed CPU utilisation, a fraction in [0, 1] of the CPU this process may use.", ""),
		raw: newDesc("levee_cpu_utilization_raw",
			"Last unsmoothed CPU utilisation observation, a fraction in [0, 1].", ""),
		saturated: newDesc("levee_cpu_saturated",
			"1 while the CPU monitor is saturated (utilisation reached the threshold and has not stayed below it for the cooldown), else 0.", ""),
		threshold: newDesc("levee_cpu_threshold",
			"Smoothed utilisation at or above which the CPU monitor becomes saturated.", ""),
		samples: newDesc("levee_cpu_samples_total",
			"Successful samples of the CPU source.", ""),
		late: newDesc("levee_cpu_late_samples_total",
			"CPU samples taken more than 1.5 intervals after the previous one (the sampler was starved).", ""),
		errors: newDesc("levee_cpu_sample_errors_total",
			"Failed samples of the CPU source.", ""),
		allowance: newDesc("levee_cpu_allowance_cpus",
			"CPUs this process may use: the smallest of its cgroup quota, its affinity mask and GOMAXPROCS (absent until a source has been sampled).", ""),
		quota: newDesc("levee_cpu_quota_cpus",
			"Cgroup CPU quota in CPUs (absent when there is none).", ""),
		periods: newDesc("levee_cpu_cfs_periods_total",
			"CFS bandwidth enforcement periods elapsed in the cgroup (absent when the source has no throttling counters).", ""),
		throttledPeriods: newDesc("levee_cpu_cfs_throttled_periods_total",
			"CFS periods in which the cgroup was throttled (absent when the source has no throttling counters).", ""),
		throttledSeconds: newDesc("levee_cpu_cfs_throttled_seconds_total",
			"Total time the cgroup was throttled by its CPU quota (absent when the source has no throttling counters).", ""),
		pressure: newDesc("levee_cpu_pressure_stalled_seconds_total",
			"CPU pressure stall time (PSI): kind some is time at least one task waited for a CPU, full is time all non-idle tasks did (absent when the kernel gives no PSI).",
			"", "kind"),
	}
}

func (c *cpuCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.info, c.utilization, c.raw, c.saturated, c.threshold,
		c.samples, c.late, c.errors, c.allowance, c.quota,
		c.periods, c.throttledPeriods, c.throttledSeconds, c.pressure)
}

func (c *cpuCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.m.Stats()
	gauge(ch, c.info, 1, st.Source)
	gauge(ch, c.utilization, st.Utilization)
	gauge(ch, c.raw, st.Raw)
	gauge(ch, c.saturated, boolGauge(st.Saturated))
	gauge(ch, c.threshold, st.Threshold)
	counter(ch, c.samples, st.Samples)
	counter(ch, c.late, st.Late)
	counter(ch, c.errors, st.Errors)
	s := st.Last
	if s.Allowance > 0 {
		gauge(ch, c.allowance, s.Allowance)
	}
	if s.Quota > 0 {
		gauge(ch, c.quota, s.Quota)
	}
	if s.HasThrottling {
		counter(ch, c.periods, s.Throttling.Periods)
		counter(ch, c.throttledPeriods, s.Throttling.Throttled)
		emit(ch, c.throttledSeconds, prometheus.CounterValue, s.Throttling.ThrottledTime.Seconds())
	}
	if s.HasPressure {
		emit(ch, c.pressure, prometheus.CounterValue, s.Pressure.Some.Total.Seconds(), "some")
		emit(ch, c.pressure, prometheus.CounterValue, s.Pressure.Full.Total.Seconds(), "full")
	}
}

// ---- scale (loadshed.Controller)

type scaleCollector struct {
	s     Scaler
	scale *prometheus.Desc
}

func newScaleCollector(name string, s Scaler) *scaleCollector {
	return &scaleCollector{s: s, scale: newDesc("levee_loadshed_scale",
		"Scale factor in (0, 1] a load-shedding controller applies to its limits (1: not shedding).", name)}
}

func (c *scaleCollector) Describe(ch chan<- *prometheus.Desc) { describe(ch, c.scale) }

func (c *scaleCollector) Collect(ch chan<- prometheus.Metric) { gauge(ch, c.scale, c.s.Scale()) }

// ---- ratelimit.Limiter

type limiterCollector struct {
	l                  *ratelimit.Limiter
	rate, burst, scale *prometheus.Desc
}

func newLimiterCollector(name string, l *ratelimit.Limiter) *limiterCollector {
	return &limiterCollector{
		l: l,
		rate: newDesc("levee_limit_rate",
			"Rate in force of a token bucket, in tokens per second: its configured rate times its scale (+Inf for an infinite rate).", name),
		burst: newDesc("levee_limit_burst",
			"Burst in force of a token bucket: its configured burst times its scale, rounded down, at least 1.", name),
		scale: newDesc("levee_limit_scale",
			"Scale factor in (0, 1] applied to a token bucket's rate and burst.", name),
	}
}

func (c *limiterCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.rate, c.burst, c.scale)
}

func (c *limiterCollector) Collect(ch chan<- prometheus.Metric) {
	rate := float64(c.l.EffectiveLimit())
	if c.l.EffectiveLimit() == ratelimit.Inf {
		rate = math.Inf(1)
	}
	gauge(ch, c.rate, rate)
	gauge(ch, c.burst, float64(c.l.EffectiveBurst()))
	gauge(ch, c.scale, c.l.Scale())
}

// ---- ratelimit.Keyed

type keyedCollector struct {
	k                          *ratelimit.Keyed
	keys, evictions, overflows *prometheus.Desc
}

func newKeyedCollector(name string, k *ratelimit.Keyed) *keyedCollector {
	return &keyedCollector{
		k: k,
		keys: newDesc("levee_keyed_keys",
			"Keys with a bucket in a set of per-key token buckets.", name),
		evictions: newDesc("levee_keyed_evictions_total",
			"Per-key buckets evicted, by the idle sweeper or at the key cap.", name),
		overflows: newDesc("levee_keyed_overflows_total",
			"Admissions decided by the shared overflow bucket because the key cap was reached.", name),
	}
}

func (c *keyedCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.keys, c.evictions, c.overflows)
}

func (c *keyedCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.k.Stats()
	gauge(ch, c.keys, float64(st.Keys))
	counter(ch, c.evictions, st.Evicted)
	counter(ch, c.overflows, st.Overflows)
}

// ---- bulkhead.Bulkhead and bulkhead.Adaptive

// concurrencyLimit is what Bulkhead and Adaptive have in common.
type concurrencyLimit interface {
	InFlight() int
	Limit() int
	Waiting() int
	Stats() bulkhead.Stats
}

type bulkheadCollector struct {
	b                        concurrencyLimit
	a                        *bulkhead.Adaptive // nil for a fixed Bulkhead
	inflight, limit, waiting *prometheus.Desc
	calls                    *prometheus.Desc
	minLatency, probes       *prometheus.Desc
}

func newBulkheadCollector(name string, b concurrencyLimit, a *bulkhead.Adaptive) *bulkheadCollector {
	c := &bulkheadCollector{
		b: b,
		a: a,
		inflight: newDesc("levee_inflight",
			"Calls holding a slot of a concurrency limit (bulkhead or adaptive limit).", name),
		limit: newDesc("levee_concurrency_limit",
			"Current limit of a concurrency limit (bulkhead or adaptive limit).", name),
		waiting: newDesc("levee_waiting",
			"Calls queued for a slot of a concurrency limit.", name),
		calls: newDesc("levee_bulkhead_calls_total",
			"Calls to a concurrency limit by result: admitted (given a slot), refused (full), timed_out (gave up after the maximum wait) or canceled (context ended while queued).",
			name, "result"),
	}
	if a != nil {
		c.minLatency = newDesc("levee_adaptive_min_latency_seconds",
			"No-load latency an adaptive concurrency limit compares against (0 before its first window).", name)
		c.probes = newDesc("levee_adaptive_probes_total",
			"Minimum-latency probes of an adaptive concurrency limit that ended.", name)
	}
	return c
}

func (c *bulkheadCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.inflight, c.limit, c.waiting, c.calls)
	if c.a != nil {
		describe(ch, c.minLatency, c.probes)
	}
}

func (c *bulkheadCollector) Collect(ch chan<- prometheus.Metric) {
	gauge(ch, c.inflight, float64(c.b.InFlight()))
	gauge(ch, c.limit, float64(c.b.Limit()))
	gauge(ch, c.waiting, float64(c.b.Waiting()))
	st := c.b.Stats()
	counter(ch, c.calls, st.Admitted, "admitted")
	counter(ch, c.calls, st.Refused, "refused")
	counter(ch, c.calls, st.TimedOut, "timed_out")
	counter(ch, c.calls, st.Canceled, "canceled")
	if c.a != nil {
		gauge(ch, c.minLatency, c.a.MinLatency().Seconds())
		counter(ch, c.probes, c.a.Probes())
	}
}

// ---- breaker.Breaker

// breakerStates are every state of a Breaker, in order.
var breakerStates = [...]breaker.State{
	breaker.StateClosed, breaker.StateOpen, breaker.StateHalfOpen,
	breaker.StateForcedOpen, breaker.StateDisabled,
}

type breakerCollector struct {
	b                                  *breaker.Breaker
	state, outcomes, slow, rejected    *prometheus.Desc
	changes, duplicates                *prometheus.Desc
	windowCalls, windowFails, windowSl *prometheus.Desc
}

func newBreakerCollector(name string, b *breaker.Breaker) *breakerCollector {
	return &breakerCollector{
		b: b,
		state: newDesc("levee_breaker_state",
			"1 for the circuit breaker's current state (closed, open, half-open, forced-open, disabled), 0 for the others.",
			name, "state"),
		outcomes: newDesc("levee_breaker_outcomes_total",
			"Outcomes of calls a circuit breaker admitted: recorded as success or failure, ignored (by the classifier or as a local refusal), or late (dropped because the state had changed).",
			name, "outcome"),
		slow: newDesc("levee_breaker_slow_calls_total",
			"Recorded calls slower than the circuit breaker's slow-call threshold (also counted as success or failure).", name),
		rejected: newDesc("levee_breaker_rejected_total",
			"Calls a circuit breaker refused (open, forced open, or half-open with every probe in flight).", name),
		changes: newDesc("levee_breaker_state_changes_total",
			"State changes and resets of a circuit breaker.", name),
		duplicates: newDesc("levee_breaker_duplicate_done_total",
			"Done calls on a circuit breaker's permit that was already finished: a caller's bug; they record nothing.", name),
		windowCalls: newDesc("levee_breaker_window_calls",
			"Calls in a circuit breaker's current window (the closed state's sliding window, or the finished half-open probes).", name),
		windowFails: newDesc("levee_breaker_window_failures",
			"Failed calls in a circuit breaker's current window.", name),
		windowSl: newDesc("levee_breaker_window_slow_calls",
			"Slow calls in a circuit breaker's current window.", name),
	}
}

func (c *breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.state, c.outcomes, c.slow, c.rejected, c.changes, c.duplicates,
		c.windowCalls, c.windowFails, c.windowSl)
}

func (c *breakerCollector) Collect(ch chan<- prometheus.Metric) {
	// Snapshot, not State: State would make a due transition (open to
	// half-open), and a scrape must not move the breaker.
	s := c.b.Snapshot()
	for _, st := range breakerStates {
		gauge(ch, c.state, boolGauge(s.State == st), st.String())
	}
	counter(ch, c.outcomes, s.Successes, "success")
	counter(ch, c.outcomes, s.Failures, "failure")
	counter(ch, c.outcomes, s.Ignored, "ignored")
	counter(ch, c.outcomes, s.Late, "late")
	counter(ch, c.slow, s.SlowCalls)
	counter(ch, c.rejected, s.Rejected)
	counter(ch, c.changes, s.Generation)
	counter(ch, c.duplicates, s.Duplicates)
	gauge(ch, c.windowCalls, float64(s.WindowCalls))
	gauge(ch, c.windowFails, float64(s.WindowFailures))
	gauge(ch, c.windowSl, float64(s.WindowSlowCalls))
}

// ---- throttle.Throttle

type throttleCollector struct {
	t                                        *throttle.Throttle
	now                                      func() time.Time
	probability, requests, accepts, decision *prometheus.Desc
}

func newThrottleCollector(name string, t *throttle.Throttle, now func() time.Time) *throttleCollector {
	return &throttleCollector{
		t:   t,
		now: now,
		probability: newDesc("levee_throttle_probability",
			"Drop probability of an adaptive client throttle over its window.", name),
		requests: newDesc("levee_throttle_window_requests",
			"Requests counted in an adaptive client throttle's window.", name),
		accepts: newDesc("levee_throttle_window_accepts",
			"Requests the backend accepted in an adaptive client throttle's window.", name),
		decision: newDesc("levee_throttle_decisions_total",
			"Decisions of an adaptive client throttle: allowed (sent) or throttled (dropped locally).", name, "result"),
	}
}

func (c *throttleCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.probability, c.requests, c.accepts, c.decision)
}

func (c *throttleCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.t.SnapshotAt(c.now())
	gauge(ch, c.probability, s.Probability)
	gauge(ch, c.requests, float64(s.Requests))
	gauge(ch, c.accepts, float64(s.Accepts))
	counter(ch, c.decision, s.Allowed, "allowed")
	counter(ch, c.decision, s.Throttled, "throttled")
}

// ---- retrybudget.Budget

type retryBudgetCollector struct {
	b                           *retrybudget.Budget
	now                         func() time.Time
	requests, retries, decision *prometheus.Desc
}

func newRetryBudgetCollector(name string, b *retrybudget.Budget, now func() time.Time) *retryBudgetCollector {
	return &retryBudgetCollector{
		b:   b,
		now: now,
		requests: newDesc("levee_retry_budget_window_requests",
			"Requests (first attempts) counted in a retry budget's window.", name),
		retries: newDesc("levee_retry_budget_window_retries",
			"Retries counted in a retry budget's window.", name),
		decision: newDesc("levee_retry_budget_decisions_total",
			"Retries a retry budget was asked for: granted (sent) or refused (the call returned its last error).", name, "result"),
	}
}

func (c *retryBudgetCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.requests, c.retries, c.decision)
}

func (c *retryBudgetCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.b.SnapshotAt(c.now())
	gauge(ch, c.requests, float64(s.Requests))
	gauge(ch, c.retries, float64(s.Retries))
	counter(ch, c.decision, s.Granted, "granted")
	counter(ch, c.decision, s.Refused, "refused")
}

// ---- runlimit.Limiter

type runLimitCollector struct {
	l                         *runlimit.Limiter
	limit, running, waiting   *prometheus.Desc
	updates, probes, rebases  *prometheus.Desc
	refusals                  *prometheus.Desc
	flows, forgotten, tenants *prometheus.Desc
}

func newRunLimitCollector(name string, l *runlimit.Limiter) *runLimitCollector {
	return &runLimitCollector{
		l:       l,
		limit:   newDesc("levee_runlimit_limit", "Calls the run limit lets run at once, as learned.", name),
		running: newDesc("levee_runlimit_running", "Calls holding a turn to run.", name),
		waiting: newDesc("levee_runlimit_waiting", "Calls waiting for a turn to run.", name),
		updates: newDesc("levee_runlimit_updates_total", "Intervals after which the run limit was reconsidered.", name),
		probes:  newDesc("levee_runlimit_probes_total", "Service-time probes at a lower limit that ended.", name),
		rebases: newDesc("levee_runlimit_rebases_total", "Probes that found the service itself slower or faster and moved the baseline.", name),
		refusals: newDesc("levee_runlimit_refusals_total",
			"Calls the run limit refused for want of a turn, by the evidence of overload they were refused on: cpu, overrun, standing, lane or spike.", name, "evidence"),
		flows: newDesc("levee_runlimit_flows", "Flows (methods) the run limit tracks apart, each with its own learned service time and lanes; at most its cap.", name),
		forgotten: newDesc("levee_runlimit_flows_forgotten_total",
			"Flows the run limit forgot, the least recently used idle one each time, to make room for a new name at its cap.", name),
		tenants: newDesc("levee_runlimit_tenants", "Tenants the run limit tracks apart, over all flows; at most its cap.", name),
	}
}

func (c *runLimitCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.limit, c.running, c.waiting, c.updates, c.probes, c.rebases, c.refusals, c.flows, c.forgotten, c.tenants)
}

func (c *runLimitCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.l.Stats()
	gauge(ch, c.limit, float64(s.Limit))
	gauge(ch, c.running, float64(s.Running))
	gauge(ch, c.waiting, float64(s.Waiting))
	counter(ch, c.updates, s.Updates)
	counter(ch, c.probes, s.Probes)
	counter(ch, c.rebases, s.Rebases)
	counter(ch, c.refusals, s.RefusedOn.CPU, "cpu")
	counter(ch, c.refusals, s.RefusedOn.Overrun, "overrun")
	counter(ch, c.refusals, s.RefusedOn.Standing, "standing")
	counter(ch, c.refusals, s.RefusedOn.Lane, "lane")
	counter(ch, c.refusals, s.RefusedOn.Spike, "spike")
	gauge(ch, c.flows, float64(s.Flows))
	counter(ch, c.forgotten, s.Forgotten)
	gauge(ch, c.tenants, float64(c.l.Tenants()))
}

// ---- ORCA load reports

type orcaCollector struct {
	o          ORCASource
	misordered *prometheus.Desc
}

func newORCACollector(o ORCASource) *orcaCollector {
	return &orcaCollector{o: o, misordered: newDesc("levee_orca_misordered_total",
		"Calls whose per-call ORCA report the application made alone, since grpc-go's orca.CallMetricsServerOption was installed after levee's options (grpcguard.ORCA.Misordered).", "")}
}

func (c *orcaCollector) Describe(ch chan<- *prometheus.Desc) { describe(ch, c.misordered) }

func (c *orcaCollector) Collect(ch chan<- prometheus.Metric) {
	counter(ch, c.misordered, c.o.Misordered())
}
