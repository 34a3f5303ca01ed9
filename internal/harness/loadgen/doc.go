// Package loadgen is an open-loop load generator for request/response
// services, used by `levee load` and `levee demo`.
//
// Open loop means that requests start on a schedule — constant or Poisson
// arrivals at each phase's rate — whether or not earlier requests have
// finished. A slow or stalled server therefore cannot slow the generator
// down, and latency is measured from each request's scheduled start, not
// from when a busy client got round to sending it: there is no coordinated
// omission. The only thing that stops a scheduled request from starting is
// the max-in-flight safety cap, and every request it stops is counted as
// dropped by the generator, never silently skipped.
//
// The generator knows nothing about the service: a request is a
// [CallFunc], and its outcome is classified by the gRPC status code of the
// error it returns (see [Stats]). Latencies are recorded in HDR histograms
// (github.com/HdrHistogram/hdrhistogram-go), successes and refusals
// separately, per second, per phase and in total.
//
// A typical run:
//
//	gen, err := loadgen.New(call, []loadgen.Phase{
//		{Name: "normal", Duration: 10 * time.Second, Rate: 100},
//		{Name: "spike", Duration: 10 * time.Second, Rate: 2000},
//	}, loadgen.WithDeadline(time.Second), loadgen.WithProgress(os.Stderr))
//	if err != nil { ... }
//	res, err := gen.Run(ctx)
package loadgen
