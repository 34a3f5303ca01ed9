package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/levee-go/levee/memory"
	"github.com/levee-go/levee/memshed"
)

// AddMemory exports m's readings (levee_memory_*): utilisation and the
// projected share of the limit, the GC's CPU fraction, saturation, the
// limit, the runtime's heap and goroutines, the cgroup's working set and
// limit events, and the sampling counters. A Registry takes one Monitor.
//
// The goroutine count is the runtime's; beside it, for a grpcguard
// Server (AddServer), levee_tap_refusals_pending counts the calls refused
// in the tap whose grpc-go deadline timer is still armed, which hold heap
// but no goroutine until their deadline (see docs/memory.md).
func (r *Registry) AddMemory(m *memory.Monitor) error {
	if m == nil {
		return fmt.Errorf("%w: AddMemory: nil *memory.Monitor", ErrInvalid)
	}
	return r.addSingle(&r.memory, "AddMemory: a *memory.Monitor", newMemoryCollector(m))
}

// AddMemShed exports a memory guard (levee_memshed_*): its budget, the
// memory the running calls hold, its refusals and engagements, and each
// method's learned cost.
func (r *Registry) AddMemShed(name string, s *memshed.Shedder) error {
	if s == nil {
		return fmt.Errorf("%w: AddMemShed(%q): nil *memshed.Shedder", ErrInvalid, name)
	}
	return r.add("memshed", "AddMemShed", name, newMemShedCollector(name, s))
}

type memoryCollector struct {
	m *memory.Monitor

	info, utilization, projected, gc, saturated, limited, limit *prometheus.Desc
	heapLive, heapGoal, total, goroutines, workingSet           *prometheus.Desc
	oomKills, maxEvents, samples, errors                        *prometheus.Desc
}

func newMemoryCollector(m *memory.Monitor) *memoryCollector {
	return &memoryCollector{
		m:    m,
		info: newDesc("levee_memory_info", "Always 1; the source label says what the memory monitor measures.", "", "source"),
		utilization: newDesc("levee_memory_utilization",
			"Share in [0, 1] of its memory limit the process uses (cgroup working set, or runtime memory against GOMEMLIMIT); 0 without a limit.", ""),
		projected: newDesc("levee_memory_projected",
			"Share in [0, 1] of its memory limit the process heads for: the next GC's heap against a cgroup limit, the live heap against GOMEMLIMIT; what the memory guard follows.", ""),
		gc:        newDesc("levee_memory_gc_fraction", "Share in [0, 1] of CPU time the Go GC took over its recent cycles.", ""),
		saturated: newDesc("levee_memory_saturated", "1 while the memory monitor is saturated (utilisation at or above its threshold, within the cooldown), else 0.", ""),
		limited:   newDesc("levee_memory_limited", "1 when the process has a memory limit (cgroup or GOMEMLIMIT), else 0.", ""),
		limit:     newDesc("levee_memory_limit_bytes", "The smallest memory limit of the process in bytes (absent without one).", ""),
		heapLive:  newDesc("levee_memory_heap_live_bytes", "Heap the last GC found live.", ""),
		heapGoal:  newDesc("levee_memory_heap_goal_bytes", "Heap size at which the next GC is due.", ""),
		total:     newDesc("levee_memory_runtime_bytes", "Memory the Go runtime has mapped and not returned to the system.", ""),
		goroutines: newDesc("levee_memory_goroutines",
			"Live goroutines at the last sample (a refused-in-tap call holds none; see levee_tap_refusals_pending).", ""),
		workingSet: newDesc("levee_memory_cgroup_working_set_bytes", "The cgroup's usage less its inactive page cache (absent without a cgroup).", ""),
		oomKills:   newDesc("levee_memory_cgroup_oom_kills_total", "Processes of the cgroup killed by the OOM killer (absent without a cgroup).", ""),
		maxEvents:  newDesc("levee_memory_cgroup_max_events_total", "Times the cgroup's usage reached its hard limit (v2 max, v1 failcnt; absent without a cgroup).", ""),
		samples:    newDesc("levee_memory_samples_total", "Successful samples of the memory source.", ""),
		errors:     newDesc("levee_memory_sample_errors_total", "Failed samples of the memory source.", ""),
	}
}

func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.info, c.utilization, c.projected, c.gc, c.saturated, c.limited, c.limit,
		c.heapLive, c.heapGoal, c.total, c.goroutines, c.workingSet, c.oomKills, c.maxEvents, c.samples, c.errors)
}

func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.m.Stats()
	gauge(ch, c.info, 1, st.Source)
	gauge(ch, c.utilization, st.Utilization)
	gauge(ch, c.projected, st.Projected)
	gauge(ch, c.gc, st.GCFraction)
	gauge(ch, c.saturated, boolGauge(st.Saturated))
	gauge(ch, c.limited, boolGauge(st.Limited))
	if st.Limit > 0 {
		gauge(ch, c.limit, float64(st.Limit))
	}
	rt := st.Last.Runtime
	gauge(ch, c.heapLive, float64(rt.HeapLive))
	gauge(ch, c.heapGoal, float64(rt.HeapGoal))
	gauge(ch, c.total, float64(rt.Total))
	gauge(ch, c.goroutines, float64(rt.Goroutines))
	if st.Last.Kind != memory.KindRuntime {
		gauge(ch, c.workingSet, float64(st.Last.Cgroup.WorkingSet()))
		counter(ch, c.oomKills, st.Last.Cgroup.Events.OOMKill)
		counter(ch, c.maxEvents, st.Last.Cgroup.Events.Max)
	}
	counter(ch, c.samples, st.Samples)
	counter(ch, c.errors, st.Errors)
}

type memShedCollector struct {
	s                                       *memshed.Shedder
	budget, inflight, running, refused, eng *prometheus.Desc
	pressure, cost                          *prometheus.Desc
}

func newMemShedCollector(name string, s *memshed.Shedder) *memShedCollector {
	return &memShedCollector{
		s:        s,
		budget:   newDesc("levee_memshed_budget_bytes", "Memory running critical calls may hold while the guard sheds; 0 without memory pressure (no budget).", name),
		inflight: newDesc("levee_memshed_inflight_bytes", "Memory the running calls are estimated to hold (their methods' learned costs).", name),
		running:  newDesc("levee_memshed_running_calls", "Calls holding room in the memory budget.", name),
		refused:  newDesc("levee_memshed_refused_total", "Calls the memory guard refused.", name),
		eng:      newDesc("levee_memshed_engaged_total", "Times memory pressure made the guard set a budget.", name),
		pressure: newDesc("levee_memshed_pressure", "1 when the last tick found memory pressure (projected share or GC fraction at its threshold), else 0.", name),
		cost:     newDesc("levee_memshed_method_cost_bytes", "Learned memory cost of a call, by method (\"\" for the methods beyond memshed.MaxMethods).", name, "method"),
	}
}

func (c *memShedCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.budget, c.inflight, c.running, c.refused, c.eng, c.pressure, c.cost)
}

func (c *memShedCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	gauge(ch, c.budget, float64(st.Budget))
	gauge(ch, c.inflight, float64(st.InFlight))
	gauge(ch, c.running, float64(st.Running))
	counter(ch, c.refused, st.Refused)
	counter(ch, c.eng, st.Engaged)
	gauge(ch, c.pressure, boolGauge(st.Pressure))
	for _, m := range st.Methods {
		gauge(ch, c.cost, float64(m.Cost), m.Method)
	}
}

// tapLeftovers is what a grpcguard.Server reports of its tap refusals
// still pending in grpc-go (Server.TapLeftovers).
type tapLeftovers interface {
	TapLeftovers(now time.Time) (pending int64, total uint64)
}
