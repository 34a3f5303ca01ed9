package stats

// Sample is the server's state at one instant.
type Sample struct {
	// Time is the server's clock, unix ns.
	Time int64 `json:"time_ns"`
	// Calls, Late and Canceled are the inventory service's counters:
	// handler runs finished, and those that finished after the caller's
	// deadline or after the caller went away (wasted work).
	Calls    uint64 `json:"calls"`
	Late     uint64 `json:"late"`
	Canceled uint64 `json:"canceled"`
	InFlight int64  `json:"in_flight"`
	// CPUSeconds is the process's CPU time (user+system) so far; -1 when
	// the OS does not report it.
	CPUSeconds float64 `json:"cpu_seconds"`
	// Gauges are the policy's live values ("scale").
	Gauges map[string]float64 `json:"gauges,omitempty"`
	// Memory is the process's memory at the sample.
	Memory Memory `json:"memory"`
}

// Memory is what a Sample says of the process's memory, read from the Go
// runtime (runtime/metrics) and, for RSS, from /proc/self/status.
type Memory struct {
	// RSS is the resident set size in bytes (VmRSS), 0 where the OS does
	// not say.
	RSS uint64 `json:"rss_bytes"`
	// HeapLive is the heap the last GC found live.
	HeapLive uint64 `json:"heap_live_bytes"`
	// GCCPUSeconds and CPUSeconds are the runtime's cumulative GC CPU
	// time and the CPU time available to the scheduler (GOMAXPROCS × wall
	// time), which it updates at the end of each GC cycle: their growth
	// between two samples is the GC's CPU fraction.
	GCCPUSeconds float64 `json:"gc_cpu_seconds"`
	CPUSeconds   float64 `json:"sched_cpu_seconds"`
	// GCIdleSeconds is the part of GCCPUSeconds that marked on
	// processors with nothing else to run.
	GCIdleSeconds float64 `json:"gc_idle_cpu_seconds"`
	// Goroutines is the number of live goroutines.
	Goroutines uint64 `json:"goroutines"`
}

func (s Sample) wasted() uint64 { return s.Late + s.Canceled }

// Doc is the JSON document served on /stats.
type Doc struct {
	// CPUs is GOMAXPROCS: how many CPUs the server may use at once.
	CPUs int `json:"cpus"`
	// Protected tells whether the protection policy is on.
	Protected bool `json:"protected"`
	// Capacity is the capacity the policy was sized from, calls/s.
	Capacity float64 `json:"capacity"`
	// Samples are the recorded samples newer than the request's since
	// parameter, oldest first, and a last one taken for the request.
	Samples []Sample `json:"samples"`
}
