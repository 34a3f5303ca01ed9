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
