// Package stats is the /stats endpoint of `levee serve` and its client.
//
// The server side ([Recorder], [Gauges]) samples the inventory service's
// counters, the process's CPU time and the protection policy's live
// values about once a second, from a goroutine of its own, and serves the
// recorded series as JSON. The client side ([Client]) is what `levee
// demo` and `levee load` use to read that series after a run and turn it
// into the report's server samples.
package stats
