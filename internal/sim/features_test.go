package sim

import (
	"math"
	"testing"
	"time"
)

// One thread of another process on one processor takes half of it: an
// unprotected CPU-bound server above its capacity serves half of it
// (calls of 2ms, 4ms beside the other thread: none is preempted).
func TestOthersTakeTheirShare(t *testing.T) {
	cpu := CPU
	cpu.CPU = 2 * time.Millisecond
	sh := steady(cpu, 1.5, 20*time.Second)
	sh.Others = 1
	r := mustRun(t, sh, Unprotected{}, 1)
	var n int
	for _, k := range r.Served[2:20] {
		n += k
	}
	if rate := float64(n) / 18; math.Abs(rate/(r.Capacity/2)-1) > 0.05 {
		t.Errorf("beside another process's goroutine: served %.0f/s, want half the capacity %.0f/s within 5%%", rate, r.Capacity/2)
	}
}

// A load generator that spends ClientCPU on the server's processors for
// each call it sends takes the phase's calls a second times that of
// them: sending 1.5x the capacity of a server of 4ms calls on two
// processors at a ClientCPU that makes 0.3 of a processor, it leaves the
// unprotected server 1.7 processors, 0.85 of its capacity.
func TestClientCPUTakesItsShare(t *testing.T) {
	sh := Cores2
	sh.CPU, sh.ClientCPU = 4*time.Millisecond, 0
	sh = steady(sh, 1.5, 20*time.Second)
	capacity := sh.Capacity(false)
	sh.ClientCPU = time.Duration(0.3 / (1.5 * capacity) * float64(time.Second)) // 0.3 processors at 1.5x
	r := mustRun(t, sh, Unprotected{}, 1)
	var n int
	for _, k := range r.Served[2:20] {
		n += k
	}
	if rate, want := float64(n)/18, 0.85*capacity; math.Abs(rate/want-1) > 0.05 {
		t.Errorf("beside a generator taking 0.3 of 2 processors: served %.0f/s, want %.0f/s (0.85 of the capacity %.0f/s) within 5%%", rate, want, capacity)
	}
}

// Closed-loop callers keep at most one call each in flight, and send
// the next at once: eight callers on eight connections serve the pool's
// capacity, and no call waits for a connection.
func TestCallersAreAClosedLoop(t *testing.T) {
	sh := IO
	sh.Callers, sh.Deadline = 8, time.Hour
	sh.Phases = []Phase{{Name: Normal, Duration: 10 * time.Second}}
	r := mustRun(t, sh, Unprotected{}, 1)
	p := r.Phase(Normal)
	// Each call: 0.3ms of CPU and the transport's, then 10ms of query.
	per := sh.CPUPerCall() + sh.Query
	if want := 8 * 10 * time.Second.Seconds() / per.Seconds(); math.Abs(float64(p.Succeeded)/want-1) > 0.05 {
		t.Errorf("8 callers for 10s: %d calls served, want about %.0f", p.Succeeded, want)
	}
	// At worst a call waits for the other seven's CPU on the processor,
	// never for a connection (a query's 10ms).
	if max, bound := Quantile(p.Success, 1), per+8*sh.CPUPerCall(); max > bound {
		t.Errorf("slowest call %v, want <= %v (no wait for a connection)", max, bound)
	}
}

// A pool that shrinks at SlowAt to SlowConns serves that many queries at
// once from then on: half its connections, half the calls a second.
func TestSlowConns(t *testing.T) {
	sh := IO
	sh.SlowConns, sh.SlowAt, sh.Deadline = 4, 10*time.Second, time.Hour
	sh.Phases = []Phase{{Name: Spike, Duration: 20 * time.Second, Load: 1.5}}
	if got, want := sh.Capacity(true), sh.Capacity(false)/2; math.Abs(got/want-1) > 0.01 {
		t.Errorf("Capacity(true) = %.0f/s, want %.0f/s (half the pool)", got, want)
	}
	r := mustRun(t, sh, Unprotected{}, 1)
	before := float64(r.Served[8]+r.Served[9]) / 2
	after := float64(r.Served[15]+r.Served[16]) / 2
	if math.Abs(after/before-0.5) > 0.05 {
		t.Errorf("served %.0f/s before the pool went from 8 to 4, %.0f/s after, want half as many", before, after)
	}
}

// A query that slows at SlowAt stays slow: what the pool serves falls
// by SlowBy from then on.
func TestSlowAt(t *testing.T) {
	sh := IO
	sh.SlowBy, sh.SlowAt, sh.Deadline = 2, 10*time.Second, time.Hour
	sh.Phases = []Phase{{Name: Spike, Duration: 20 * time.Second, Load: 1.5}}
	r := mustRun(t, sh, Unprotected{}, 1)
	before := float64(r.Served[8]+r.Served[9]) / 2
	after := float64(r.Served[15]+r.Served[16]) / 2
	if math.Abs(after/before-0.5) > 0.05 {
		t.Errorf("served %.0f/s before SlowAt, %.0f/s after, want half as many", before, after)
	}
}
