package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

// A scenario is one kind of service under the same open-loop overload.
type scenario struct {
	name  string
	about string
	// server is the inventory configuration (the Protection, Capacity and
	// WorkIterations fields are filled in per run).
	server serverSpec
	// mixed adds a steady GetStock load beside the Allocate phases.
	mixed bool
	// calWorkers is the closed-loop callers of the capacity measurement:
	// enough to keep the bottleneck busy.
	calWorkers int
}

// stockRate is the GetStock load of the mixed scenario, calls/s.
const stockRate = 100

var scenarios = []scenario{
	{
		name:       "cpu",
		about:      "CPU-bound: each Allocate burns 5 ms of CPU",
		server:     serverSpec{CPUWork: 5 * time.Millisecond},
		calWorkers: 8,
	},
	{
		name:       "io",
		about:      "I/O-bound: each Allocate burns 300 µs of CPU, then holds one of 8 database connections for 10 ms",
		server:     serverSpec{CPUWork: 300 * time.Microsecond, DBConns: 8, DBLatency: 10 * time.Millisecond},
		calWorkers: 32,
	},
	{
		name:       "mixed",
		about:      fmt.Sprintf("the cpu server; the spike is on Allocate while GetStock (0.1 ms of CPU) runs steady at %d/s throughout", stockRate),
		server:     serverSpec{CPUWork: 5 * time.Millisecond, StockReadWork: 100 * time.Microsecond},
		mixed:      true,
		calWorkers: 8,
	},
}

func scenarioNamed(name string) (scenario, bool) {
	for _, s := range scenarios {
		if s.name == name {
			return s, true
		}
	}
	return scenario{}, false
}

func scenarioNames() string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	return strings.Join(names, ",")
}

// capacityKey identifies the servers that share one capacity: the mixed
// scenario's Allocate is the cpu scenario's.
func (s scenario) capacityKey() string {
	return fmt.Sprintf("%v/%d/%v", s.server.CPUWork, s.server.DBConns, s.server.DBLatency)
}

// phases is the Allocate schedule sized from capacity: the warm-up (if
// any) and normal at normalLoad × capacity, the spike at spikeLoad ×
// capacity, recovery as normal.
func (c *config) phases(capacity float64) []loadgen.Phase {
	normal := c.normalLoad * capacity
	return c.schedule(normal, c.spikeLoad*capacity)
}

// stockPhases is the steady GetStock schedule of the mixed scenario,
// phase by phase beside the Allocate one.
func (c *config) stockPhases() []loadgen.Phase { return c.schedule(stockRate, stockRate) }

func (c *config) schedule(normal, spike float64) []loadgen.Phase {
	var ph []loadgen.Phase
	if c.warmup > 0 {
		ph = append(ph, loadgen.Phase{Name: "warmup", Duration: c.warmup, Rate: normal})
	}
	return append(ph,
		loadgen.Phase{Name: "normal", Duration: c.normal, Rate: normal},
		loadgen.Phase{Name: "spike", Duration: c.spike, Rate: spike},
		loadgen.Phase{Name: "recovery", Duration: c.recovery, Rate: normal},
	)
}

// phaseNamed returns the phase of res called name.
func phaseNamed(res *loadgen.Result, name string) loadgen.PhaseResult {
	for _, p := range res.Phases {
		if p.Name == name {
			return p
		}
	}
	return loadgen.PhaseResult{}
}
