// Package otelmetrics exports levee's guards through the OpenTelemetry
// metrics API: the measures of package metrics, as asynchronous
// instruments whose callbacks read the guards' own atomics when a reader
// collects.
//
//	reg := otelmetrics.New(otel.GetMeterProvider())
//	defer reg.Close() // unregisters every callback
//	err := errors.Join(
//		reg.AddServer(p.Guard()),         // p is a *protect.Server
//		reg.AddRunLimit("run", p.RunLimit()),
//	)
//	if m := p.CPU(); m != nil {
//		err = errors.Join(err, reg.AddCPU(m))
//	}
//
// It imports only the API module go.opentelemetry.io/otel/metric; the
// application picks the SDK and the exporter. Package metrics (Prometheus)
// and this package are independent: a program using one does not link the
// other's client.
//
// # Cost
//
// Nothing is added to a request path: an instrument is observable (an
// asynchronous counter, up-down counter or gauge) and its callback, one per
// registered guard, reads the counters the guard keeps anyway (Stats,
// Snapshot, HandlerStarts) when the MeterProvider's reader collects. The
// cost moves to the collection, once a reader's interval rather than once
// a call. BenchmarkCollect reads one guard of every kind through the SDK's
// manual reader, to set beside a Prometheus Gather of the same guards by
// package metrics; docs/benchmarks.md has its figures.
//
// # Instruments
//
// Names and units follow the OpenTelemetry semantic conventions: dotted
// lower-case names in the levee namespace, no _total suffix or unit in the
// name, units in UCUM (s for durations, 1 for fractions and 0/1 states,
// annotations in braces for counts: {call}). Each attribute is the
// Prometheus label of the same measure prefixed with "levee.": levee.rule,
// levee.guard, levee.result, levee.name (the name a guard was added under),
// levee.source, levee.kind, levee.state, levee.outcome, levee.reason,
// levee.evidence. The values are those
// of the Prometheus series, point for point (the package's tests check it
// against this table).
//
//	OTel instrument                     instrument      unit        Prometheus series
//	levee.decisions                     counter         {call}      levee_decisions_total
//	levee.handler.starts                counter         {call}      levee_handler_starts_total
//	levee.refusals                      counter         {call}      levee_refusals_total
//	levee.tap.refusals.pending          gauge           {call}      levee_tap_refusals_pending
//	levee.tap.refusals                  counter         {call}      levee_tap_refusals_total
//	levee.client.decisions              counter         {call}      levee_client_decisions_total
//	levee.cpu.info                      gauge           1           levee_cpu_info
//	levee.cpu.utilization               gauge           1           levee_cpu_utilization
//	levee.cpu.utilization.raw           gauge           1           levee_cpu_utilization_raw
//	levee.cpu.saturated                 gauge           1           levee_cpu_saturated
//	levee.cpu.threshold                 gauge           1           levee_cpu_threshold
//	levee.cpu.samples                   counter         {sample}    levee_cpu_samples_total
//	levee.cpu.samples.late              counter         {sample}    levee_cpu_late_samples_total
//	levee.cpu.sample.errors             counter         {error}     levee_cpu_sample_errors_total
//	levee.cpu.allowance                 gauge           {cpu}       levee_cpu_allowance_cpus
//	levee.cpu.quota                     gauge           {cpu}       levee_cpu_quota_cpus
//	levee.cpu.cfs.periods               counter         {period}    levee_cpu_cfs_periods_total
//	levee.cpu.cfs.throttled_periods     counter         {period}    levee_cpu_cfs_throttled_periods_total
//	levee.cpu.cfs.throttled_time        counter         s           levee_cpu_cfs_throttled_seconds_total
//	levee.cpu.pressure.stalled_time     counter         s           levee_cpu_pressure_stalled_seconds_total
//	levee.loadshed.scale                gauge           1           levee_loadshed_scale
//	levee.limit.rate                    gauge           {token}/s   levee_limit_rate
//	levee.limit.burst                   gauge           {token}     levee_limit_burst
//	levee.limit.scale                   gauge           1           levee_limit_scale
//	levee.keyed.keys                    updowncounter   {key}       levee_keyed_keys
//	levee.keyed.evictions               counter         {bucket}    levee_keyed_evictions_total
//	levee.keyed.overflows               counter         {call}      levee_keyed_overflows_total
//	levee.inflight                      updowncounter   {call}      levee_inflight
//	levee.concurrency.limit             gauge           {call}      levee_concurrency_limit
//	levee.waiting                       updowncounter  {call}      levee_waiting
//	levee.bulkhead.calls                counter         {call}      levee_bulkhead_calls_total
//	levee.adaptive.min_latency          gauge           s           levee_adaptive_min_latency_seconds
//	levee.adaptive.probes               counter         {probe}     levee_adaptive_probes_total
//	levee.breaker.state                 gauge           1           levee_breaker_state
//	levee.breaker.outcomes              counter         {call}      levee_breaker_outcomes_total
//	levee.breaker.slow_calls            counter         {call}      levee_breaker_slow_calls_total
//	levee.breaker.rejected              counter         {call}      levee_breaker_rejected_total
//	levee.breaker.state_changes         counter         {change}    levee_breaker_state_changes_total
//	levee.breaker.duplicate_done        counter         {call}      levee_breaker_duplicate_done_total
//	levee.breaker.window.calls          gauge           {call}      levee_breaker_window_calls
//	levee.breaker.window.failures       gauge           {call}      levee_breaker_window_failures
//	levee.breaker.window.slow_calls     gauge           {call}      levee_breaker_window_slow_calls
//	levee.throttle.probability          gauge           1           levee_throttle_probability
//	levee.throttle.window.requests      gauge           {call}      levee_throttle_window_requests
//	levee.throttle.window.accepts       gauge           {call}      levee_throttle_window_accepts
//	levee.throttle.decisions            counter         {call}      levee_throttle_decisions_total
//	levee.retry_budget.window.requests  gauge           {call}      levee_retry_budget_window_requests
//	levee.retry_budget.window.retries   gauge           {retry}     levee_retry_budget_window_retries
//	levee.retry_budget.decisions        counter         {retry}     levee_retry_budget_decisions_total
//	levee.runlimit.limit                gauge           {call}      levee_runlimit_limit
//	levee.runlimit.running              updowncounter   {call}      levee_runlimit_running
//	levee.runlimit.waiting              updowncounter   {call}      levee_runlimit_waiting
//	levee.runlimit.updates              counter         {update}    levee_runlimit_updates_total
//	levee.runlimit.probes               counter         {probe}     levee_runlimit_probes_total
//	levee.runlimit.rebases              counter         {rebase}    levee_runlimit_rebases_total
//	levee.runlimit.refusals             counter         {call}      levee_runlimit_refusals_total
//	levee.runlimit.flows                gauge           {flow}      levee_runlimit_flows
//	levee.runlimit.flows.forgotten      counter         {flow}      levee_runlimit_flows_forgotten_total
//	levee.runlimit.tenants              gauge           {tenant}    levee_runlimit_tenants
//	levee.orca.misordered               counter         {call}      levee_orca_misordered_total
//
// Counters are cumulative and monotonic (the guard's count since it was
// created); up-down counters hold counts of things present now, which add
// up across processes; gauges hold values that do not (limits, fractions,
// states). An OpenTelemetry Prometheus exporter derives names of its own
// from these, adding suffixes for units and counters, so they may differ
// from package metrics' names (the last column): the dashboards and alerts
// in deploy/ query package metrics' names.
//
// levee.cpu.info mirrors the Prometheus info series; a deployment that
// prefers resource attributes may drop it with a View.
package otelmetrics
