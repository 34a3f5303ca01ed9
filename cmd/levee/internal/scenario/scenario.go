// Package scenario is what the scenarios of `levee demo` have in common:
// the contract a scenario meets ([Scenario]), a registry to pick one by
// name ([Registry]), the settings the demo's command line gives every
// scenario ([Settings]), what a scenario returns ([Result]) and how the
// demo writes it ([Write]), and the machinery of scenarios that drive
// `levee serve` processes: starting one ([StartServer]) and keeping the
// load generator off its CPU ([PlanCPUs]).
//
// Each scenario lives in a package of its own below this one, with the
// services and counters only it uses; cmd/levee lists them in a Registry.
package scenario

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
)

// Scenario is one way to run the demo. Name and Run are required.
type Scenario struct {
	// Name is what -scenario picks it by.
	Name string
	// Description completes "Run the <name> demo: " (or, for other than
	// the default scenario, "With -scenario <name>: ") in the help of
	// `levee demo`; it may hold line breaks.
	Description string
	// Flags, if not nil, registers the scenario's own flags on fs and
	// returns the check of their values, called after parsing and only
	// when the scenario is picked. An error from check names the flag; the
	// command reports it as a usage error.
	Flags func(fs *flag.FlagSet) (check func() error)
	// Run runs the scenario with the common settings s and returns what
	// the demo reports. It writes its progress to env.Stderr.
	Run func(ctx context.Context, env Env, s Settings) (*Result, error)
}

// Env is what the command gives a scenario besides its settings.
type Env struct {
	// Stderr receives progress lines and the servers' own stderr.
	Stderr io.Writer
	// Exe is the levee binary, re-executed as `levee serve` by
	// StartServer.
	Exe string
	// ChildEnv is added to the environment of those servers.
	ChildEnv []string
	// ReadyTimeout bounds the wait for a server's health check.
	ReadyTimeout time.Duration
}

// MaxSchedule bounds the schedule of a run: the load generator keeps a
// tally of about 0.7 KiB for each of its seconds (some 450 MB for a
// week), and asked for years it ran out of memory. A scenario's flags
// that size its phases keep within it.
const MaxSchedule = 7 * 24 * time.Hour

// Settings are the demo's common settings, from the flags of `levee demo`.
// The zero value is not runnable: the command fills every field.
type Settings struct {
	// Capacity is the server's capacity in calls/s (-capacity); 0 when
	// MeasureCapacity.
	Capacity float64
	// MeasureCapacity is -capacity auto: the scenario measures (or
	// estimates) the capacity itself.
	MeasureCapacity bool
	// CPUWork is the CPU time each Allocate burns (-cpu-work).
	CPUWork time.Duration
	// Normal, Spike and Recovery are the lengths of the phases.
	Normal, Spike, Recovery time.Duration
	// NormalLoad and SpikeLoad are the loads of the normal (and recovery)
	// and of the spike phase, as multiples of capacity.
	NormalLoad, SpikeLoad float64
	// CapacityGuess is the multiple of the capacity the protected server
	// is told as an upper bound (-capacity-guess); 0: it is told nothing.
	CapacityGuess float64
	// Recipe is the protected server's `levee serve -recipe` (-recipe);
	// "": the default, the library's preset.
	Recipe string
	// Transport is the servers' `levee serve -transport` (-transport):
	// "" or grpc, or connect, through whose gRPC protocol the load
	// generator's grpc-go client then reaches both servers. The overload
	// scenarios honour it (overload, io, mixed, tenants).
	Transport string
	// Calibrate is how long capacity is measured, with CalibrationWorkers
	// closed-loop callers.
	Calibrate          time.Duration
	CalibrationWorkers int
	// Load is how the load generator drives the server.
	Load Load
	// Drain bounds the wait, after a run, for the server to finish the
	// calls it still holds (so that late work is counted); StopGrace the
	// wait for a server process to exit before it is killed. Not flags:
	// tests shorten them.
	Drain, StopGrace time.Duration
}

// Load is what the flags `levee demo` shares with `levee load` make of the
// load generator.
type Load struct {
	// Options are the generator's options, without progress output.
	Options []loadgen.Option
	// Arrivals, Deadline and Retries are the flags behind Options, for the
	// report's notes.
	Arrivals string
	Deadline time.Duration
	Retries  int
	// Conns is the number of gRPC connections to spread the load over.
	Conns int
	// Quiet turns off the progress lines.
	Quiet bool
}

// SpikePhases is the overload schedule sized from capacity: normal load, a
// spike, and recovery at normal load.
func (s Settings) SpikePhases(capacity float64) []loadgen.Phase {
	normal := s.NormalLoad * capacity
	return []loadgen.Phase{
		{Name: "normal", Duration: s.Normal, Rate: normal},
		{Name: "spike", Duration: s.Spike, Rate: s.SpikeLoad * capacity},
		{Name: "recovery", Duration: s.Recovery, Rate: normal},
	}
}

// GeneratorOptions returns the load generator's options for the run name:
// Load.Options and, unless Load.Quiet, progress lines on env.Stderr
// prefixed with name.
func (s Settings) GeneratorOptions(env Env, name string) []loadgen.Option {
	opts := s.Load.Options
	if !s.Load.Quiet {
		opts = append(opts[:len(opts):len(opts)], loadgen.WithProgress(prefixWriter{w: env.Stderr, prefix: name + " "}))
	}
	return opts
}

// Result is what a scenario produced.
type Result struct {
	// Capacity is the capacity the phases were sized from, calls/s.
	Capacity float64
	// Measured tells whether Capacity was measured (not given).
	Measured bool
	// WorkIterations is the SHA-256 rounds per Allocate of both servers.
	WorkIterations string
	// Comparison holds the unprotected and the protected run, in that
	// order.
	Comparison *report.Comparison
}

// Registry is the scenarios -scenario picks from, the first the default.
// Create it with NewRegistry; it is not changed afterwards and is safe
// for concurrent use.
type Registry struct {
	list []Scenario
}

// NewRegistry returns a registry of ss, in that order. It is an error if
// ss is empty, or a scenario has no name or no Run, or two share a name.
func NewRegistry(ss ...Scenario) (*Registry, error) {
	if len(ss) == 0 {
		return nil, errors.New("scenario: no scenarios")
	}
	seen := make(map[string]bool, len(ss))
	for i, s := range ss {
		switch {
		case s.Name == "":
			return nil, fmt.Errorf("scenario: scenario %d has no name", i)
		case s.Run == nil:
			return nil, fmt.Errorf("scenario: %q has no Run", s.Name)
		case seen[s.Name]:
			return nil, fmt.Errorf("scenario: %q registered twice", s.Name)
		}
		seen[s.Name] = true
	}
	return &Registry{list: append([]Scenario(nil), ss...)}, nil
}

// All returns the scenarios in order.
func (r *Registry) All() []Scenario { return append([]Scenario(nil), r.list...) }

// Default returns the first scenario.
func (r *Registry) Default() Scenario { return r.list[0] }

// Lookup returns the scenario called name.
func (r *Registry) Lookup(name string) (Scenario, bool) {
	for _, s := range r.list {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Names returns the scenarios' names in order.
func (r *Registry) Names() []string {
	names := make([]string, len(r.list))
	for i, s := range r.list {
		names[i] = s.Name
	}
	return names
}

// Write prints res's side-by-side tables to stdout and writes its HTML
// report to htmlPath and its runs as JSON to jsonPath, each unless empty;
// either path, not both, may be "-": stdout. Then stdout is the report or
// the JSON alone, for a program to read: the tables, and the line that
// names the HTML report, go to stderr.
func Write(stdout, stderr io.Writer, res *Result, htmlPath, jsonPath string) error {
	if htmlPath == "-" && jsonPath == "-" {
		return errors.New("the HTML report and the JSON cannot both go to stdout")
	}
	w := stdout
	if htmlPath == "-" || jsonPath == "-" {
		w = stderr
	}
	fmt.Fprintln(w)
	if err := report.WriteTable(w, res.Comparison); err != nil {
		return err
	}
	switch htmlPath {
	case "":
	case "-":
		if err := report.WriteHTML(stdout, res.Comparison); err != nil {
			return fmt.Errorf("writing HTML report: %w", err)
		}
	default:
		if err := report.WriteHTMLFile(htmlPath, res.Comparison); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nwrote %s\n", htmlPath)
	}
	if jsonPath != "" {
		doc := struct {
			Capacity float64      `json:"capacity"`
			Measured bool         `json:"capacity_measured"`
			Runs     []report.Run `json:"runs"`
		}{res.Capacity, res.Measured, res.Comparison.Runs}
		if err := report.WriteJSONFile(jsonPath, stdout, doc); err != nil {
			return err
		}
	}
	return nil
}

// prefixWriter prefixes every line written through it.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	lines := strings.SplitAfter(string(b), "\n")
	var out strings.Builder
	for _, l := range lines {
		if l == "" {
			continue
		}
		out.WriteString(p.prefix)
		out.WriteString(l)
	}
	if _, err := io.WriteString(p.w, out.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}
