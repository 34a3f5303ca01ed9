// Package policy is levee's policy file: a YAML description of how a gRPC
// server is protected, decoded strictly, built into guards, and reloaded
// while the server runs.
//
//	r, err := policy.NewReloader("/etc/levee/policy.yaml", policy.WithCPU(mon))
//	if err != nil { ... }              // every problem, as file:line:column: field: message
//	defer r.Close()
//	_ = r.Watch()                      // reload when the file changes (ConfigMap swaps included)
//	srv := grpc.NewServer(r.ServerOptions()...)
//	// on SIGHUP: r.Reload()
//
// # The file
//
// Example is a commented file that uses every section; `levee policy
// example` prints it. The sections:
//
//   - code: the refusal status, RESOURCE_EXHAUSTED (default) or UNAVAILABLE.
//   - exempt: method patterns never guarded (default: health checks and
//     reflection, decide.DefaultExempt).
//   - preset: the preset of package protect as the rule of every method no
//     other rule names ("*"): max_rate, max_concurrency, client_rate, cpu,
//     code, shadow, and per-method overrides (methods: exempt, max_rate).
//   - rules: name, methods ("/pkg.Service/Method", "/pkg.Service/*", "*"),
//     key (none, peer, tenant, header:NAME), code, shadow, and 1 to 8
//     guards.
//   - criticality: the default class (critical_plus, critical,
//     sheddable_plus, sheddable) of each method or service.
//   - tenants: the header naming a call's tenant, and tenants' weights.
//
// Each guard has a type and optional name (default: the type) and shadow:
//
//	type               parameters (default)
//	ratelimit          rate (required), burst (rate/10, at least 1)
//	keyed_ratelimit    rate (required), burst, max_keys (100000), idle_timeout (1m); needs the rule's key
//	bulkhead           limit (required), queue (0), max_wait (0s), retry_after (0s)
//	adaptive_bulkhead  min_limit (1), max_limit (1000), initial_limit (20), latency_ceiling (0s: off),
//	                   probe_interval (10s), queue, max_wait, retry_after
//	loadshed           policy (aimd or step), threshold (aimd: 0.8), factor (step: 0.2), retry_after (1s)
//	deadline           margin (1)
//	queuedelay         target (5ms), interval (100ms, at least target)
//	runlimit           min_limit (1), max_limit (1000), initial_limit (0: its default),
//	                   queue_target (0s: learned), interval (100ms), cpu (true)
//
// Rates take a unit (100/s, 6000/min, 2/h, 1/ms) and durations too (250ms,
// 1m30s); a bare 0 is accepted where 0 is allowed. A guard in shadow mode
// on its own counts the calls it would refuse (shadow_refused in
// metrics) and lets them through; a rule in shadow mode does so for all
// its guards. A runlimit cannot be shadowed alone (its turns are not a
// yes or no): shadow its rule.
//
// A deadline guard refuses a call whose time left is below margin times
// its method's service time. Beside a runlimit in its rule (the first, if
// there are several) it takes, as the preset's does, the service time
// without contention that the run limit measures where that is shorter
// than the mean of the method's successful calls it learned itself: calls
// run beside each other stretch that mean, and a mean stretched past the
// callers' deadlines would refuse calls that a turn serves in time. A new
// run limit (its parameters or the tenants' weights changed) makes a new
// deadline guard, which learns afresh. In a rule without a runlimit it
// has only that mean: while calls contend (a spike, a slow dependency) it
// may refuse as too short calls that would have met their deadlines,
// until the mean falls back or goes stale (no successful call for twice
// it, at least deadline.StaleAfter). Put it beside a runlimit there, or
// lower its margin.
//
// # Strict decoding
//
// Decode reports every problem of a file at once, as Errors, each with
// the file, line and column of the offending value and the path of its
// field (rules[2].guards[0].rate): YAML syntax, unknown or duplicate
// fields, values of the wrong type or out of range, and contradictions (a
// pattern taken by two rules or by a rule and an exemption, a rule "*"
// beside the preset, a rule named as one of the preset's rules, an exempt
// method with a rate, a keyed_ratelimit without a key, min_limit above
// max_limit, a queuedelay target above its interval, a step policy's
// factor on an aimd shedder). It never panics (FuzzDecode). For YAML
// syntax errors the YAML decoder gives a line only; the column is then the
// first non-blank one of that line.
//
// Format writes the effective policy, every default filled in, in a
// fixed order, so that two policies can be compared with diff (`levee
// policy print`); Hash identifies it.
//
// # Reloading
//
// See Reloader: a reload that fails at any step keeps the policy in
// force; a successful one swaps the server's rules atomically
// (decide.Engine.Swap); calls in flight finish under the rules that
// admitted them; guards whose rule, name, type and parameters did not
// change keep their instance, with its state and counters.
//
// # Criticality and tenants
//
// The criticality section gives every rule the classes of its methods
// (decide.Criticality: a claim above a method's class is not trusted
// from a policy file, which names no trusted callers); the tenants section
// names every rule's tenant header (decide.Rule.Tenant) and gives the
// run limits (the preset's and every runlimit guard) the tenants' weights,
// among whom they share turns max-min fairly (runlimit.Lane). Changing the
// weights builds new run limits, which learn afresh.
package policy
