package otelmetrics

import (
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/retrybudget"
	"github.com/levee-go/levee/runlimit"
	"github.com/levee-go/levee/throttle"
)

// The callbacks below read their guard when a reader collects, and only
// then, from the guard's own atomics and snapshots. Nothing here runs on
// a request path.

// Attribute keys: each is the Prometheus label of the same measure with
// the prefix "levee.".
const (
	keyName     = attribute.Key("levee.name")
	keyRule     = attribute.Key("levee.rule")
	keyGuard    = attribute.Key("levee.guard")
	keyResult   = attribute.Key("levee.result")
	keySource   = attribute.Key("levee.source")
	keyKind     = attribute.Key("levee.kind")
	keyState    = attribute.Key("levee.state")
	keyOutcome  = attribute.Key("levee.outcome")
	keyEvidence = attribute.Key("levee.evidence")
	keyReason   = attribute.Key("levee.reason")
)

// callback observes one guard's instruments.
type callback func(metric.Observer)

// builder creates the instruments of one registration and collects their
// errors; the callback is registered for insts.
type builder struct {
	meter metric.Meter
	insts []metric.Observable
	errs  []error
}

func (b *builder) keep(i metric.Observable, err error) {
	if err != nil {
		b.errs = append(b.errs, err)
		return
	}
	b.insts = append(b.insts, i)
}

func (b *builder) counter(name, unit, desc string) metric.Int64ObservableCounter {
	i, err := b.meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.keep(i, err)
	return i
}

func (b *builder) floatCounter(name, unit, desc string) metric.Float64ObservableCounter {
	i, err := b.meter.Float64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.keep(i, err)
	return i
}

func (b *builder) upDown(name, unit, desc string) metric.Int64ObservableUpDownCounter {
	i, err := b.meter.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.keep(i, err)
	return i
}

func (b *builder) gauge(name, unit, desc string) metric.Float64ObservableGauge {
	i, err := b.meter.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.keep(i, err)
	return i
}

func (b *builder) intGauge(name, unit, desc string) metric.Int64ObservableGauge {
	i, err := b.meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.keep(i, err)
	return i
}

// attrs returns the observe option of a fixed attribute set, built once at
// registration so that a collection does not rebuild it.
func attrs(kv ...attribute.KeyValue) metric.ObserveOption {
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

// count converts a counter read from a guard; counts stay far below 2^63.
func count(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

func boolValue(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Result values of levee.decisions, as in levee_decisions_total.
const (
	resultAdmitted      = "admitted"
	resultRefused       = "refused"
	resultShadowRefused = "shadow_refused"
)

// ---- decisions of a server or client

func newDecisions(b *builder, name string, stats func() []admission.GuardStats, starts func() uint64) callback {
	desc := "Decisions of each guard of each grpcguard rule, by result: admitted, refused, or shadow_refused (would have refused, let through by a shadow rule)."
	if starts == nil {
		desc = "Decisions of each guard of a grpcguard Client, by (target, method) pair in levee.rule (\"target method\") and result: admitted, refused, or shadow_refused."
	}
	decisions := b.counter(name, "{call}", desc)
	var startsI metric.Int64ObservableCounter
	if starts != nil {
		startsI = b.counter("levee.handler.starts", "{call}", "Handlers started on calls guarded by the grpcguard Server.")
	}
	return func(o metric.Observer) {
		type key struct{ rule, guard string }
		st := stats()
		// Two guards of one rule may share a name; their points would
		// collide, so they are summed, as the Prometheus collector does.
		sums := make(map[key]*admission.GuardStats, len(st))
		order := make([]key, 0, len(st))
		for i := range st {
			s := &st[i]
			k := key{s.Rule, s.Guard}
			if sum, ok := sums[k]; ok {
				sum.Admitted += s.Admitted
				sum.Refused += s.Refused
				sum.ShadowRefused += s.ShadowRefused
				continue
			}
			sums[k] = s
			order = append(order, k)
		}
		for _, k := range order {
			s := sums[k]
			rule, guard := keyRule.String(k.rule), keyGuard.String(k.guard)
			o.ObserveInt64(decisions, count(s.Admitted), attrs(rule, guard, keyResult.String(resultAdmitted)))
			o.ObserveInt64(decisions, count(s.Refused), attrs(rule, guard, keyResult.String(resultRefused)))
			o.ObserveInt64(decisions, count(s.ShadowRefused), attrs(rule, guard, keyResult.String(resultShadowRefused)))
		}
		if starts != nil {
			o.ObserveInt64(startsI, count(starts()))
		}
	}
}

// ---- cpu.Monitor

func newCPU(b *builder, m *cpu.Monitor) callback {
	info := b.intGauge("levee.cpu.info", "1", "Always 1; levee.source says what the CPU monitor measures (\"manual\" for a monitor fed by Update).")
	util := b.gauge("levee.cpu.utilization", "1", "Smoothed CPU utilisation, a fraction in [0, 1] of the CPU this process may use.")
	raw := b.gauge("levee.cpu.utilization.raw", "1", "Last unsmoothed CPU utilisation observation, a fraction in [0, 1].")
	saturated := b.intGauge("levee.cpu.saturated", "1", "1 while the CPU monitor is saturated, else 0.")
	threshold := b.gauge("levee.cpu.threshold", "1", "Smoothed utilisation at or above which the CPU monitor becomes saturated.")
	samples := b.counter("levee.cpu.samples", "{sample}", "Successful samples of the CPU source.")
	late := b.counter("levee.cpu.samples.late", "{sample}", "CPU samples taken more than 1.5 intervals after the previous one.")
	errs := b.counter("levee.cpu.sample.errors", "{error}", "Failed samples of the CPU source.")
	allowance := b.gauge("levee.cpu.allowance", "{cpu}", "CPUs this process may use: the smallest of its cgroup quota, its affinity mask and GOMAXPROCS (absent until sampled).")
	quota := b.gauge("levee.cpu.quota", "{cpu}", "Cgroup CPU quota in CPUs (absent when there is none).")
	periods := b.counter("levee.cpu.cfs.periods", "{period}", "CFS bandwidth enforcement periods elapsed in the cgroup.")
	throttled := b.counter("levee.cpu.cfs.throttled_periods", "{period}", "CFS periods in which the cgroup was throttled.")
	throttledTime := b.floatCounter("levee.cpu.cfs.throttled_time", "s", "Total time the cgroup was throttled by its CPU quota.")
	pressure := b.floatCounter("levee.cpu.pressure.stalled_time", "s", "CPU pressure stall time (PSI) by levee.kind: some or full.")
	some, full := attrs(keyKind.String("some")), attrs(keyKind.String("full"))
	return func(o metric.Observer) {
		st := m.Stats()
		o.ObserveInt64(info, 1, metric.WithAttributes(keySource.String(st.Source)))
		o.ObserveFloat64(util, st.Utilization)
		o.ObserveFloat64(raw, st.Raw)
		o.ObserveInt64(saturated, boolValue(st.Saturated))
		o.ObserveFloat64(threshold, st.Threshold)
		o.ObserveInt64(samples, count(st.Samples))
		o.ObserveInt64(late, count(st.Late))
		o.ObserveInt64(errs, count(st.Errors))
		s := st.Last
		if s.Allowance > 0 {
			o.ObserveFloat64(allowance, s.Allowance)
		}
		if s.Quota > 0 {
			o.ObserveFloat64(quota, s.Quota)
		}
		if s.HasThrottling {
			o.ObserveInt64(periods, count(s.Throttling.Periods))
			o.ObserveInt64(throttled, count(s.Throttling.Throttled))
			o.ObserveFloat64(throttledTime, s.Throttling.ThrottledTime.Seconds())
		}
		if s.HasPressure {
			o.ObserveFloat64(pressure, s.Pressure.Some.Total.Seconds(), some)
			o.ObserveFloat64(pressure, s.Pressure.Full.Total.Seconds(), full)
		}
	}
}

// ---- scale (loadshed.Controller)

func newScale(b *builder, name string, s Scaler) callback {
	scale := b.gauge("levee.loadshed.scale", "1", "Scale factor in (0, 1] a load-shedding controller applies to its limits (1: not shedding).")
	n := attrs(keyName.String(name))
	return func(o metric.Observer) { o.ObserveFloat64(scale, s.Scale(), n) }
}

// ---- ratelimit.Limiter

func newLimiter(b *builder, name string, l *ratelimit.Limiter) callback {
	rate := b.gauge("levee.limit.rate", "{token}/s", "Rate in force of a token bucket: its configured rate times its scale (+Inf for an infinite rate).")
	burst := b.intGauge("levee.limit.burst", "{token}", "Burst in force of a token bucket: its configured burst times its scale, rounded down, at least 1.")
	scale := b.gauge("levee.limit.scale", "1", "Scale factor in (0, 1] applied to a token bucket's rate and burst.")
	n := attrs(keyName.String(name))
	return func(o metric.Observer) {
		r := float64(l.EffectiveLimit())
		if l.EffectiveLimit() == ratelimit.Inf {
			r = math.Inf(1)
		}
		o.ObserveFloat64(rate, r, n)
		o.ObserveInt64(burst, int64(l.EffectiveBurst()), n)
		o.ObserveFloat64(scale, l.Scale(), n)
	}
}

// ---- ratelimit.Keyed

func newKeyed(b *builder, name string, k *ratelimit.Keyed) callback {
	keys := b.upDown("levee.keyed.keys", "{key}", "Keys with a bucket in a set of per-key token buckets.")
	evictions := b.counter("levee.keyed.evictions", "{bucket}", "Per-key buckets evicted, by the idle sweeper or at the key cap.")
	overflows := b.counter("levee.keyed.overflows", "{call}", "Admissions decided by the shared overflow bucket because the key cap was reached.")
	n := attrs(keyName.String(name))
	return func(o metric.Observer) {
		st := k.Stats()
		o.ObserveInt64(keys, int64(st.Keys), n)
		o.ObserveInt64(evictions, count(st.Evicted), n)
		o.ObserveInt64(overflows, count(st.Overflows), n)
	}
}

// ---- bulkhead.Bulkhead and bulkhead.Adaptive

// concurrencyLimit is what Bulkhead and Adaptive have in common.
type concurrencyLimit interface {
	InFlight() int
	Limit() int
	Waiting() int
	Stats() bulkhead.Stats
}

func newBulkhead(b *builder, name string, c concurrencyLimit, a *bulkhead.Adaptive) callback {
	inflight := b.upDown("levee.inflight", "{call}", "Calls holding a slot of a concurrency limit (bulkhead or adaptive limit).")
	limit := b.intGauge("levee.concurrency.limit", "{call}", "Current limit of a concurrency limit (bulkhead or adaptive limit).")
	waiting := b.upDown("levee.waiting", "{call}", "Calls queued for a slot of a concurrency limit.")
	calls := b.counter("levee.bulkhead.calls", "{call}", "Calls to a concurrency limit by levee.result: admitted, refused, timed_out or canceled.")
	var minLatency metric.Float64ObservableGauge
	var probes metric.Int64ObservableCounter
	if a != nil {
		minLatency = b.gauge("levee.adaptive.min_latency", "s", "No-load latency an adaptive concurrency limit compares against (0 before its first window).")
		probes = b.counter("levee.adaptive.probes", "{probe}", "Minimum-latency probes of an adaptive concurrency limit that ended.")
	}
	nv := keyName.String(name)
	n := attrs(nv)
	admitted := attrs(nv, keyResult.String("admitted"))
	refused := attrs(nv, keyResult.String("refused"))
	timedOut := attrs(nv, keyResult.String("timed_out"))
	canceled := attrs(nv, keyResult.String("canceled"))
	return func(o metric.Observer) {
		o.ObserveInt64(inflight, int64(c.InFlight()), n)
		o.ObserveInt64(limit, int64(c.Limit()), n)
		o.ObserveInt64(waiting, int64(c.Waiting()), n)
		st := c.Stats()
		o.ObserveInt64(calls, count(st.Admitted), admitted)
		o.ObserveInt64(calls, count(st.Refused), refused)
		o.ObserveInt64(calls, count(st.TimedOut), timedOut)
		o.ObserveInt64(calls, count(st.Canceled), canceled)
		if a != nil {
			o.ObserveFloat64(minLatency, a.MinLatency().Seconds(), n)
			o.ObserveInt64(probes, count(a.Probes()), n)
		}
	}
}

// ---- breaker.Breaker

// breakerStates are every state of a Breaker, in order.
var breakerStates = [...]breaker.State{
	breaker.StateClosed, breaker.StateOpen, breaker.StateHalfOpen,
	breaker.StateForcedOpen, breaker.StateDisabled,
}

func newBreaker(b *builder, name string, br *breaker.Breaker) callback {
	state := b.intGauge("levee.breaker.state", "1", "1 for the circuit breaker's current levee.state (closed, open, half-open, forced-open, disabled), 0 for the others.")
	outcomes := b.counter("levee.breaker.outcomes", "{call}", "Outcomes of calls a circuit breaker admitted, by levee.outcome: success, failure, ignored or late.")
	slow := b.counter("levee.breaker.slow_calls", "{call}", "Recorded calls slower than the circuit breaker's slow-call threshold.")
	rejected := b.counter("levee.breaker.rejected", "{call}", "Calls a circuit breaker refused.")
	changes := b.counter("levee.breaker.state_changes", "{change}", "State changes and resets of a circuit breaker.")
	duplicates := b.counter("levee.breaker.duplicate_done", "{call}", "Done calls on a circuit breaker's permit that was already finished: a caller's bug; they record nothing.")
	wCalls := b.intGauge("levee.breaker.window.calls", "{call}", "Calls in a circuit breaker's current window.")
	wFails := b.intGauge("levee.breaker.window.failures", "{call}", "Failed calls in a circuit breaker's current window.")
	wSlow := b.intGauge("levee.breaker.window.slow_calls", "{call}", "Slow calls in a circuit breaker's current window.")
	nv := keyName.String(name)
	n := attrs(nv)
	var states [len(breakerStates)]metric.ObserveOption
	for i, s := range breakerStates {
		states[i] = attrs(nv, keyState.String(s.String()))
	}
	success := attrs(nv, keyOutcome.String("success"))
	failure := attrs(nv, keyOutcome.String("failure"))
	ignored := attrs(nv, keyOutcome.String("ignored"))
	late := attrs(nv, keyOutcome.String("late"))
	return func(o metric.Observer) {
		// Snapshot, not State: a collection must not move the breaker.
		s := br.Snapshot()
		for i, st := range breakerStates {
			o.ObserveInt64(state, boolValue(s.State == st), states[i])
		}
		o.ObserveInt64(outcomes, count(s.Successes), success)
		o.ObserveInt64(outcomes, count(s.Failures), failure)
		o.ObserveInt64(outcomes, count(s.Ignored), ignored)
		o.ObserveInt64(outcomes, count(s.Late), late)
		o.ObserveInt64(slow, count(s.SlowCalls), n)
		o.ObserveInt64(rejected, count(s.Rejected), n)
		o.ObserveInt64(changes, count(s.Generation), n)
		o.ObserveInt64(duplicates, count(s.Duplicates), n)
		o.ObserveInt64(wCalls, int64(s.WindowCalls), n)
		o.ObserveInt64(wFails, int64(s.WindowFailures), n)
		o.ObserveInt64(wSlow, int64(s.WindowSlowCalls), n)
	}
}

// ---- throttle.Throttle

func newThrottle(b *builder, name string, t *throttle.Throttle, now func() time.Time) callback {
	probability := b.gauge("levee.throttle.probability", "1", "Drop probability of an adaptive client throttle over its window.")
	requests := b.intGauge("levee.throttle.window.requests", "{call}", "Requests counted in an adaptive client throttle's window.")
	accepts := b.intGauge("levee.throttle.window.accepts", "{call}", "Requests the backend accepted in an adaptive client throttle's window.")
	decisions := b.counter("levee.throttle.decisions", "{call}", "Decisions of an adaptive client throttle by levee.result: allowed or throttled.")
	nv := keyName.String(name)
	n := attrs(nv)
	allowed := attrs(nv, keyResult.String("allowed"))
	throttled := attrs(nv, keyResult.String("throttled"))
	return func(o metric.Observer) {
		s := t.SnapshotAt(now())
		o.ObserveFloat64(probability, s.Probability, n)
		o.ObserveInt64(requests, int64(s.Requests), n)
		o.ObserveInt64(accepts, int64(s.Accepts), n)
		o.ObserveInt64(decisions, count(s.Allowed), allowed)
		o.ObserveInt64(decisions, count(s.Throttled), throttled)
	}
}

// ---- retrybudget.Budget

func newRetryBudget(b *builder, name string, rb *retrybudget.Budget, now func() time.Time) callback {
	requests := b.intGauge("levee.retry_budget.window.requests", "{call}", "Requests (first attempts) counted in a retry budget's window.")
	retries := b.intGauge("levee.retry_budget.window.retries", "{retry}", "Retries counted in a retry budget's window.")
	decisions := b.counter("levee.retry_budget.decisions", "{retry}", "Retries a retry budget was asked for, by levee.result: granted or refused.")
	nv := keyName.String(name)
	n := attrs(nv)
	granted := attrs(nv, keyResult.String("granted"))
	refused := attrs(nv, keyResult.String("refused"))
	return func(o metric.Observer) {
		s := rb.SnapshotAt(now())
		o.ObserveInt64(requests, s.Requests, n)
		o.ObserveInt64(retries, s.Retries, n)
		o.ObserveInt64(decisions, count(s.Granted), granted)
		o.ObserveInt64(decisions, count(s.Refused), refused)
	}
}

// ---- runlimit.Limiter

func newRunLimit(b *builder, name string, l *runlimit.Limiter) callback {
	limit := b.intGauge("levee.runlimit.limit", "{call}", "Calls the run limit lets run at once, as learned.")
	running := b.upDown("levee.runlimit.running", "{call}", "Calls holding a turn to run.")
	waiting := b.upDown("levee.runlimit.waiting", "{call}", "Calls waiting for a turn to run.")
	updates := b.counter("levee.runlimit.updates", "{update}", "Intervals after which the run limit was reconsidered.")
	probes := b.counter("levee.runlimit.probes", "{probe}", "Service-time probes at a lower limit that ended.")
	rebases := b.counter("levee.runlimit.rebases", "{rebase}", "Probes that found the service itself slower or faster and moved the baseline.")
	refusals := b.counter("levee.runlimit.refusals", "{call}", "Calls the run limit refused for want of a turn, by levee.evidence: cpu, overrun, standing, lane or spike.")
	flows := b.intGauge("levee.runlimit.flows", "{flow}", "Flows (methods) the run limit tracks apart, each with its own learned service time and lanes; at most its cap.")
	forgotten := b.counter("levee.runlimit.flows.forgotten", "{flow}", "Flows the run limit forgot, the least recently used idle one each time, to make room for a new name at its cap.")
	tenants := b.intGauge("levee.runlimit.tenants", "{tenant}", "Tenants the run limit tracks apart, over all flows; at most its cap.")
	nv := keyName.String(name)
	n := attrs(nv)
	onCPU := attrs(nv, keyEvidence.String("cpu"))
	onOverrun := attrs(nv, keyEvidence.String("overrun"))
	onStanding := attrs(nv, keyEvidence.String("standing"))
	onLane := attrs(nv, keyEvidence.String("lane"))
	onSpike := attrs(nv, keyEvidence.String("spike"))
	return func(o metric.Observer) {
		s := l.Stats()
		o.ObserveInt64(limit, int64(s.Limit), n)
		o.ObserveInt64(running, int64(s.Running), n)
		o.ObserveInt64(waiting, int64(s.Waiting), n)
		o.ObserveInt64(updates, count(s.Updates), n)
		o.ObserveInt64(probes, count(s.Probes), n)
		o.ObserveInt64(rebases, count(s.Rebases), n)
		o.ObserveInt64(refusals, count(s.RefusedOn.CPU), onCPU)
		o.ObserveInt64(refusals, count(s.RefusedOn.Overrun), onOverrun)
		o.ObserveInt64(refusals, count(s.RefusedOn.Standing), onStanding)
		o.ObserveInt64(refusals, count(s.RefusedOn.Lane), onLane)
		o.ObserveInt64(refusals, count(s.RefusedOn.Spike), onSpike)
		o.ObserveInt64(flows, int64(s.Flows), n)
		o.ObserveInt64(forgotten, count(s.Forgotten), n)
		o.ObserveInt64(tenants, int64(l.Tenants()), n)
	}
}

// ---- refusals by guard, reason and evidence

func newRefusals(b *builder, src RefusalSource) callback {
	refusals := b.counter("levee.refusals", "{call}", "Calls refused, by the refusing guard (levee.guard), the reason their google.rpc.ErrorInfo carries (levee.reason: RUN_QUEUE_FULL, CPU_OVERLOADED, SUSTAINED_OVERLOAD, ...) and the evidence of overload they were refused on (levee.evidence: cpu, overrun, standing, lane, spike, memory, limit, none, ...).")
	return func(o metric.Observer) {
		for _, r := range src.RefusalCounts() {
			o.ObserveInt64(refusals, count(r.Count), attrs(keyGuard.String(r.Guard), keyReason.String(string(r.Reason)), keyEvidence.String(r.Evidence.String())))
		}
	}
}

// ---- ORCA load reports

func newORCA(b *builder, src ORCASource) callback {
	misordered := b.counter("levee.orca.misordered", "{call}", "Calls whose per-call ORCA report the application made alone, since grpc-go's orca.CallMetricsServerOption was installed after levee's options (grpcguard.ORCA.Misordered).")
	return func(o metric.Observer) { o.ObserveInt64(misordered, count(src.Misordered())) }
}
