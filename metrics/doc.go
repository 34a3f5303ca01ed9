// Package metrics exports levee's guards to Prometheus.
//
// A Registry collects the guards a process runs — a grpcguard.Server or
// Client, a cpu.Monitor, load-shedding controllers, token buckets, per-key buckets,
// bulkheads, adaptive limits, breakers and throttles — and Handler serves
// them in the Prometheus text format for a /metrics endpoint:
//
//	reg := metrics.New()
//	if err := reg.AddServer(guards); err != nil { ... }
//	if err := reg.AddCPU(monitor); err != nil { ... }
//	if err := reg.AddScale("cpu", controller); err != nil { ... }
//	http.Handle("/metrics", reg.Handler())
//
// # Cost
//
// The guards keep counters and gauges of their own, with atomics they need
// anyway (grpcguard.Server.Stats, bulkhead.Bulkhead.Stats, breaker Snapshot,
// ...). The collectors of this package read those when the Registry is
// scraped, and only then: registering a guard changes none of its code paths,
// so its admission path costs the same, allocation-free, with or without
// metrics. The benchmarks of this package measure an admission with a
// Registry attached against one without, and against the usual alternative
// of incrementing a Prometheus CounterVec on every call. The cost moves to
// the scrape, which builds each series from its guard's counters: more
// than reading as many stored gauges, but once a scrape rather than once a
// call (BenchmarkScrape; docs/benchmarks.md has its figures).
// A fixed bulkhead's counters are spread over its slots, so its scrape costs
// in proportion to the largest limit it ever had.
//
// Reading never moves a guard: a breaker is read with Snapshot, which makes
// no due state change (an open breaker whose wait is over shows open until a
// call arrives), and nothing is reset. A throttle is read, like its own
// Snapshot, at the current time, expiring the bins that have left its window
// as any later decision would.
//
// # Series
//
// Every series name starts with levee_. Guards added by name carry it in the
// name label.
//
//	AddServer    levee_decisions_total{rule,guard,result}   result: admitted, refused, shadow_refused
//	             levee_handler_starts_total
//	             levee_refusals_total{guard,reason,evidence}   reason: decide.Reason; evidence: admission.Evidence
//	             levee_tap_refusals_total, levee_tap_refusals_pending   (a *grpcguard.Server: calls refused in its tap)
//	AddClient    levee_client_decisions_total{rule,guard,result}   rule: "target method"
//	AddCPU       levee_cpu_utilization, levee_cpu_utilization_raw, levee_cpu_saturated (0/1),
//	             levee_cpu_threshold, levee_cpu_info{source},
//	             levee_cpu_samples_total, levee_cpu_late_samples_total, levee_cpu_sample_errors_total,
//	             levee_cpu_allowance_cpus, levee_cpu_quota_cpus                  (when sampled / when set)
//	             levee_cpu_cfs_periods_total, levee_cpu_cfs_throttled_periods_total,
//	             levee_cpu_cfs_throttled_seconds_total                         (cgroup sources)
//	             levee_cpu_pressure_stalled_seconds_total{kind}                 (PSI; kind: some, full)
//	AddScale     levee_loadshed_scale{name}
//	AddLimiter   levee_limit_rate{name}, levee_limit_burst{name}, levee_limit_scale{name}
//	AddKeyed     levee_keyed_keys{name}, levee_keyed_evictions_total{name}, levee_keyed_overflows_total{name}
//	AddBulkhead  levee_inflight{name}, levee_concurrency_limit{name}, levee_waiting{name},
//	             levee_bulkhead_calls_total{name,result}   result: admitted, refused, timed_out, canceled
//	AddAdaptive  the same, plus levee_adaptive_min_latency_seconds{name}, levee_adaptive_probes_total{name}
//	AddBreaker   levee_breaker_state{name,state} (1 for the current state), levee_breaker_outcomes_total{name,outcome},
//	             levee_breaker_slow_calls_total{name}, levee_breaker_rejected_total{name},
//	             levee_breaker_state_changes_total{name}, levee_breaker_window_calls{name},
//	             levee_breaker_window_failures{name}, levee_breaker_window_slow_calls{name},
//	             levee_breaker_duplicate_done_total{name}
//	AddThrottle  levee_throttle_probability{name}, levee_throttle_window_requests{name},
//	             levee_throttle_window_accepts{name}, levee_throttle_decisions_total{name,result}
//	AddRetryBudget  levee_retry_budget_window_requests{name}, levee_retry_budget_window_retries{name},
//	                levee_retry_budget_decisions_total{name,result}   result: granted, refused
//	AddRunLimit  levee_runlimit_limit{name}, levee_runlimit_running{name}, levee_runlimit_waiting{name},
//	             levee_runlimit_updates_total{name}, levee_runlimit_probes_total{name},
//	             levee_runlimit_rebases_total{name}, levee_runlimit_refusals_total{name,evidence},
//	             levee_runlimit_flows{name}, levee_runlimit_flows_forgotten_total{name}, levee_runlimit_tenants{name}
//	AddORCA      levee_orca_misordered_total
//	AddPolicy    levee_policy_reload_total{result}, levee_policy_hash
//	AddFleet     levee_fleet_decisions_total{name,source,result}, levee_fleet_redis_up{name},
//	             levee_fleet_breaker_state{name,state}, levee_fleet_replicas{name}, levee_fleet_rate{name},
//	             levee_fleet_local_rate{name}, levee_fleet_redis_errors_total{name}, levee_fleet_leases{name},
//	             levee_fleet_script_reloads_total{name}, levee_fleet_heartbeats_total{name},
//	             levee_fleet_lease_refills_total{name}, levee_fleet_lease_dropped_total{name}
//	AddMemory    levee_memory_utilization, levee_memory_projected, levee_memory_gc_fraction,
//	             levee_memory_saturated, levee_memory_limited, levee_memory_limit_bytes, levee_memory_info{source},
//	             levee_memory_heap_live_bytes, levee_memory_heap_goal_bytes, levee_memory_runtime_bytes,
//	             levee_memory_goroutines, levee_memory_samples_total, levee_memory_sample_errors_total,
//	             levee_memory_cgroup_working_set_bytes, levee_memory_cgroup_oom_kills_total,
//	             levee_memory_cgroup_max_events_total                              (cgroup sources)
//	AddMemShed   levee_memshed_budget_bytes{name}, levee_memshed_inflight_bytes{name},
//	             levee_memshed_running_calls{name}, levee_memshed_refused_total{name},
//	             levee_memshed_engaged_total{name}, levee_memshed_pressure{name},
//	             levee_memshed_method_cost_bytes{name,method}
//
// Register adds collectors of the caller's own beside them, and
// WithRuntimeMetrics the Prometheus client's Go and process collectors.
//
// This is the only levee package that imports the Prometheus client.
package metrics
