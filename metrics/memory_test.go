package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/memory"
	"github.com/levee-go/levee/memshed"
)

func TestMemoryMonitor(t *testing.T) {
	m, err := memory.NewManual()
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(memory.Sample{Time: t0, Kind: memory.KindCgroupV1,
		Runtime: memory.Runtime{HeapLive: 10, HeapGoal: 20, Total: 40, HeapMapped: 30, Goroutines: 7},
		Cgroup:  memory.Cgroup{Usage: 50, Max: 100, Events: memory.Events{Max: 3, OOMKill: 1}}})
	r := newTestRegistry()
	if err := r.AddMemory(m); err != nil {
		t.Fatalf("AddMemory: %v", err)
	}
	if err := r.AddMemory(m); err == nil {
		t.Error("a second AddMemory succeeded")
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_memory_info{source="manual"}`:    "1",
		`levee_memory_utilization`:              "0.5",
		`levee_memory_projected`:                "0.4", // goal 20 + 10 besides the heap + 10 the runtime did not map
		`levee_memory_gc_fraction`:              "0",
		`levee_memory_saturated`:                "0",
		`levee_memory_limited`:                  "1",
		`levee_memory_limit_bytes`:              "100",
		`levee_memory_heap_live_bytes`:          "10",
		`levee_memory_heap_goal_bytes`:          "20",
		`levee_memory_runtime_bytes`:            "40",
		`levee_memory_goroutines`:               "7",
		`levee_memory_cgroup_working_set_bytes`: "50",
		`levee_memory_cgroup_oom_kills_total`:   "1",
		`levee_memory_cgroup_max_events_total`:  "3",
		`levee_memory_samples_total`:            "0",
		`levee_memory_sample_errors_total`:      "0",
	}, "levee_memory_")
}

type fixedMemory struct{ p float64 }

func (f fixedMemory) Projected() float64       { return f.p }
func (f fixedMemory) HardUtilization() float64 { return f.p }
func (f fixedMemory) HardLimit() uint64        { return 0 }
func (f fixedMemory) GCFraction() float64      { return 0 }
func (f fixedMemory) Limited() bool            { return true }

func TestMemShed(t *testing.T) {
	s, err := memshed.NewManual("memory", fixedMemory{0.5})
	if err != nil {
		t.Fatal(err)
	}
	var c admission.Call
	c.Init(context.Background(), "/pkg.Svc/M", t0)
	s.Tick(t0)
	// The method's first call counts in the shared entry (method ""); it
	// succeeds, and the method gets a cost of its own.
	first := s.Start(c, admission.Permit{})
	s.Finish(c, first.Permit, admission.Outcome{})
	d := s.Start(c, admission.Permit{})
	r := newTestRegistry()
	if err := r.AddMemShed("memory", s); err != nil {
		t.Fatalf("AddMemShed: %v", err)
	}
	if err := r.AddMemShed("memory", nil); err == nil {
		t.Error("AddMemShed(nil) succeeded")
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_memshed_budget_bytes{name="memory"}`:                          "0",
		`levee_memshed_inflight_bytes{name="memory"}`:                        "8192",
		`levee_memshed_running_calls{name="memory"}`:                         "1",
		`levee_memshed_refused_total{name="memory"}`:                         "0",
		`levee_memshed_engaged_total{name="memory"}`:                         "0",
		`levee_memshed_pressure{name="memory"}`:                              "0",
		`levee_memshed_method_cost_bytes{method="/pkg.Svc/M",name="memory"}`: "8192",
		`levee_memshed_method_cost_bytes{method="",name="memory"}`:           "8192",
	}, "levee_memshed_")
	s.Finish(c, d.Permit, admission.Outcome{})
	_ = time.Second
}
