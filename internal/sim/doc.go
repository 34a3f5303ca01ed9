// Package sim is a deterministic discrete-event simulator of a server
// under open-loop load, in virtual time, for testing admission control
// (runlimit, deadline, token buckets, the CPU signal) against the shapes
// of bench/peers in seconds and without noise.
//
// # The model
//
// A Server has Procs processors scheduled as Go schedules goroutines:
//
//   - a processor runs one goroutine at a time; a goroutine runs until it
//     blocks, yields (runtime.Gosched), ends, or has run for Quantum
//     (10ms: sysmon's preemption), when it goes to the back of the global
//     run queue;
//   - a goroutine made ready by a running one (a channel send, a go
//     statement) runs next on that processor (runnext), ahead of the
//     queue; one made ready by a timer or the network poller joins the
//     back of the global queue;
//   - a processor with nothing to run polls the network; while every
//     processor is busy, the network is polled only every PollEvery
//     (10ms, sysmon), so requests that arrive while handlers run back to
//     back stay unread until then.
//
// Requests arrive on one connection, read by one transport goroutine: it
// reads every request waiting, each costing ReadCPU, asks the
// Protection's Admit (the transport's tap), and writes a refusal
// (RefuseCPU) or starts the call's handler goroutine. A handler asks the
// Protection's Start (the interceptor: a turn to run), which may make it
// wait; then it does its call's work: CPU, then a query on one of the
// connections of a Pool (held for the query's time, a FIFO queue for
// one), then it ends: Finish, and the response (WriteCPU). A call whose
// deadline passes while it waits for a turn or a connection, or during
// its query, ends at once as failed by overload; CPU work runs to its
// end, as a handler that does not look at its context does.
//
// A client short of CPU (Shape.ClientRate) sends a call's HEADERS when
// the call arrives but its request body later: bodies leave in arrival
// order, one every 1/ClientRate, refused calls' too (the client learns of
// a refusal late). The tap decides at HEADERS, as grpc-go's does; the
// handler goroutine it starts blocks until the body arrives (the network
// poller makes it ready), as grpc-go's unary handler does in RecvMsg
// before the interceptors, and only then asks the Protection's Start. A
// call whose deadline passes before its body ends there: Start is never
// asked, and the Protection is told nothing (grpcguard finds such calls
// by a sweep; the simulated preset's tap places lapse). No call of
// runlimit's row with a saturated client meets it: its bodies come
// within the deadline.
// Above ClientRate the body's lag grows by (load/ClientRate - 1) of the
// time spent there; runlimit's simClientRate is fit to the lags measured
// against bench/peers' generator (docs/smallpool.md).
//
// A Shape is a workload of bench/peers: its service (Work), its load
// (Poisson or evenly spaced arrivals at a multiple of the capacity per
// phase, maybe in clumps; a second steady method; sources of other
// classes or tenants, at their own load or sharing each phase's:
// Shape.Share; closed-loop callers, Shape.Callers), its phases, and
// what changes under it: a dependency that slows in the spike or from
// a set instant (Shape.SlowAt), or whose pool shrinks then
// (Shape.SlowConns), goroutines of another process that take
// the processors from a set instant (Shape.Others), or a load generator
// that shares them in proportion to the calls it sends
// (Shape.ClientCPU). A Clock lets a test
// look at the Protection at set virtual instants (Clock.After before
// Run). Run simulates it
// against a Protection and returns a Result: per phase the calls offered,
// served, refused and timed out, with latency percentiles.
//
// Everything is driven by one seeded source of randomness and one event
// queue ordered by time and then by the order events were scheduled: a
// Shape, a seed and a deterministic Protection give a bit-identical
// Result.
//
// A Shape with Memory has a heap under a hard memory limit (a cgroup's),
// and GOMEMLIMIT if Memory.SoftLimit is set: calls allocate and hold
// memory, Go's collector runs at GOGC=100 (more often near a soft limit)
// and its marking costs CPU on the processors, the runtime keeps freed
// memory until its scavenger returns it, and a process past its limit
// is killed (see Memory).
//
// What it leaves out: the client's side of the network (a response is
// received when its write ends; HEADERS are sent on time, even by a
// client short of CPU), the collector of a shape without Memory (but a
// cold start's slower calls, Shape.Cold), and the kernel.
package sim
