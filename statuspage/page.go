package statuspage

import (
	"cmp"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/nilness"
	"github.com/levee-go/levee/memshed"
	"github.com/levee-go/levee/runlimit"
)

// Bounds of what a Page keeps and shows.
const (
	// MaxRefusals is how many of the last refusals a Page keeps.
	MaxRefusals = 32
	// MaxFlows is how many flows of a run limit a Page shows: those with
	// the most calls waiting, then by name.
	MaxFlows = 64
	// MaxLanes is how many lanes with calls waiting a Page shows per
	// flow.
	MaxLanes = 16
	// MaxNameLen is the longest method name or tenant a Page keeps, in
	// bytes; a longer one is cut between two UTF-8 characters, and ends
	// with "...".
	MaxNameLen = 256
)

// CPUSignal is a CPU signal a Page shows.
//
// Deprecated: use cpu.ThresholdSignal, the same interface, the type of
// Sources.CPU. CPUSignal will be removed in the next release.
type CPUSignal = cpu.ThresholdSignal

// MemorySignal is a memory signal a Page shows: *memory.Monitor
// satisfies it.
type MemorySignal interface {
	Projected() float64
	Threshold() float64
	Saturated() bool
}

// Sources are what a Page reads. Every field is optional; a nil one is
// left off the page, and the zero Sources show only the refusals a Page
// records. New copies it. A Page reads its sources from the goroutine of
// each request, several at once: they must be safe for concurrent use, as
// the types named below are.
type Sources struct {
	// Engine is the engine whose refusals the page counts. Its rules'
	// run limits (the guards of runlimit.NewGuard) and memory guards
	// (*memshed.Shedder) are found among its rules at each read.
	Engine *decide.Engine
	// CPU is the process's CPU signal (*cpu.Monitor).
	CPU cpu.ThresholdSignal
	// Memory is the process's memory signal (*memory.Monitor).
	Memory MemorySignal
}

// Page is the debug page of one engine: an http.Handler. Feed it the
// engine's refusals through Observer. Create one with New; the zero Page
// shows nothing but its own refusals. It is safe for concurrent use.
type Page struct {
	src Sources
	now func() time.Time // in-package tests set it

	mu   sync.Mutex
	ring [MaxRefusals]Refusal
	n    uint64 // refusals kept since New; the next goes to ring[n%MaxRefusals]
}

// New returns the page of src. A CPU or Memory source that holds a nil
// pointer (a nil *cpu.Monitor) is nil too: it is left off the page.
func New(src Sources) *Page {
	if nilness.Is(src.CPU) {
		src.CPU = nil
	}
	if nilness.Is(src.Memory) {
		src.Memory = nil
	}
	return &Page{src: src, now: time.Now}
}

// Record keeps ev among the last refusals. It takes the page's lock for
// a copy and allocates nothing (a method or tenant longer than
// MaxNameLen is cut, which does).
func (p *Page) Record(ev decide.RefusalEvent) {
	r := Refusal{
		Time: ev.Time, Method: cut(ev.Method), Class: ev.Class.String(), Tenant: cut(ev.Tenant),
		Guard: ev.Guard, Reason: string(ev.Reason), Evidence: ev.Evidence.String(),
		Value: finiteOr0(ev.Value), Threshold: finiteOr0(ev.Threshold), Code: ev.Code.String(),
		RetryAfterMS: float64(ev.RetryAfter) / float64(time.Millisecond), NoRetry: ev.NoRetry,
	}
	if ev.RetryAfter == admission.Never {
		r.RetryAfterMS = -1
	}
	if ev.Cause != ev.Reason {
		r.Cause = string(ev.Cause)
	}
	p.mu.Lock()
	p.ring[p.n%MaxRefusals] = r
	p.n++
	p.mu.Unlock()
}

// Observer returns next with an OnRefusal that keeps each refusal it is
// told of on the page (Record) before it tells next's own. Give it to
// the engine: engine.SetObserver(page.Observer(decide.Observer{})). The
// engine samples refusals at next's RefusalsPerSecond.
func (p *Page) Observer(next decide.Observer) decide.Observer {
	on := next.OnRefusal
	next.OnRefusal = func(ev decide.RefusalEvent) {
		p.Record(ev)
		if on != nil {
			on(ev)
		}
	}
	return next
}

// cut shortens s to at most MaxNameLen bytes, ending with "...": it keeps
// the longest prefix of at most MaxNameLen-3 bytes that does not end
// inside a UTF-8 character, so that valid UTF-8 stays valid (bytes that
// are not UTF-8 may still be cut anywhere). It allocates once, for the
// result.
func cut(s string) string {
	if len(s) <= MaxNameLen {
		return s
	}
	i := MaxNameLen - 3
	for j := i; j > i-utf8.UTFMax; j-- {
		if utf8.RuneStart(s[j]) {
			i = j
			break
		}
	}
	return s[:i] + "..."
}

// Status is what the page shows, at one instant: its JSON form. Each
// Page.Status builds a fresh one that shares nothing with the Page; it
// and the types it holds (RunLimit, Flow, Lane, Move, Signal,
// RefusalCount, Refusal) are plain values with no lock of their own,
// safe to read from several goroutines, not to write from several at
// once. The zero Status is a page of nothing, at no time.
type Status struct {
	Time time.Time `json:"time"`
	// RunLimits are the run limits of the engine's rules.
	RunLimits []RunLimit `json:"run_limits"`
	// Signals are the signals of overload now.
	Signals []Signal `json:"signals"`
	// RefusalCounts are the refusals since the engine started, by guard,
	// reason and evidence.
	RefusalCounts []RefusalCount `json:"refusal_counts"`
	// Refusals are the last refusals kept (sampled), newest first.
	Refusals []Refusal `json:"refusals"`
}

// RunLimit is one run limit (runlimit.Limiter), a plain value of a Status
// (see Status on concurrency). The zero value is a limit of 0 with
// nothing running or waiting.
type RunLimit struct {
	Guard   string `json:"guard"`
	Limit   int    `json:"limit"`
	Floor   int    `json:"floor"`
	Ceiling int    `json:"ceiling"`
	Running int    `json:"running"`
	Waiting int    `json:"waiting"`
	Tenants int    `json:"tenants"`
	// Flows are its flows, those with the most calls waiting first, at
	// most MaxFlows; FlowsLeft counts those left off.
	Flows     []Flow `json:"flows"`
	FlowsLeft int    `json:"flows_left,omitempty"`
	// Moves are the learner's last moves, newest first.
	Moves []Move `json:"moves"`
}

// Flow is one flow of a run limit: the calls of one method. A plain value
// of a Status (see Status on concurrency); the zero Flow is an unnamed
// flow with no figure learned and no call waiting.
type Flow struct {
	Name string `json:"name"`
	// ServiceTimeMS is the mean service time now, BaselineMS the service
	// time without contention the learner compares it with (0 until
	// learned), QueueTargetMS the longest a call may wait for a turn.
	ServiceTimeMS float64 `json:"service_time_ms"`
	BaselineMS    float64 `json:"baseline_ms"`
	QueueTargetMS float64 `json:"queue_target_ms"`
	// Waiting is the calls admitted to wait for a turn, over its lanes:
	// the places they hold (runlimit.Lane.Held), including calls whose
	// handler has not asked for its turn yet.
	Waiting int `json:"waiting"`
	// Lanes are the lanes with calls waiting, the MaxLanes busiest.
	Lanes []Lane `json:"lanes,omitempty"`
}

// Lane is the calls of one tenant and class of a flow waiting for a turn.
// A plain value of a Status (see Status on concurrency); the zero Lane is
// the unnamed tenant's, of no class, with no call waiting.
type Lane struct {
	Tenant  string `json:"tenant"`
	Class   string `json:"class"`
	Waiting int    `json:"waiting"`
}

// Move is one move of a run limit's learned limit, a plain value of a
// Status (see Status on concurrency). The zero Move is no move: 0 to 0,
// at no time, for no cause.
type Move struct {
	Time  time.Time `json:"time"`
	From  int       `json:"from"`
	To    int       `json:"to"`
	Cause string    `json:"cause"`
	Probe string    `json:"probe,omitempty"`
}

// Signal is one signal of overload now, a plain value of a Status (see
// Status on concurrency). The zero Signal is unnamed and is no evidence.
type Signal struct {
	// Source is what reads it: a run limit's guard name, "memory_guard"
	// (its guard's name), "cpu" or "memory" (the monitors).
	Source string `json:"source"`
	// Name is the signal: an evidence kind (cpu, overrun, standing,
	// spike, memory) or "gc", "hard", "saturated".
	Name string `json:"name"`
	// Value and Threshold are its measure and the level at which it is
	// evidence, in Unit.
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	Unit      string  `json:"unit"`
	// Evidence is whether it counts as evidence of overload now.
	Evidence bool `json:"evidence"`
}

// RefusalCount is a series of levee_refusals_total, a plain value of a
// Status (see Status on concurrency); the zero value counts nothing.
type RefusalCount struct {
	Guard    string `json:"guard"`
	Reason   string `json:"reason"`
	Evidence string `json:"evidence"`
	Count    uint64 `json:"count"`
}

// Refusal is one refusal kept: a plain value, which the Page copies in
// under its lock and Status copies out (see Status on concurrency). The
// zero Refusal is an empty record, not a refusal of any call.
type Refusal struct {
	Time   time.Time `json:"time"`
	Method string    `json:"method"`
	Class  string    `json:"class"`
	Tenant string    `json:"tenant,omitempty"`
	Guard  string    `json:"guard"`
	// Reason is the ErrorInfo's reason; Cause the guard's own, when the
	// reason is SUSTAINED_OVERLOAD.
	Reason string `json:"reason"`
	Cause  string `json:"cause,omitempty"`
	// Evidence, Value and Threshold are the evidence of overload it was
	// made on and its figures (see docs/why-refused.md).
	Evidence  string  `json:"evidence"`
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	Code      string  `json:"code"`
	// RetryAfterMS is the retry delay it announced, -1 for none that
	// helps; NoRetry, whether it told the client not to retry.
	RetryAfterMS float64 `json:"retry_after_ms"`
	NoRetry      bool    `json:"no_retry,omitempty"`
}

// limiterGuard is the guard of runlimit.NewGuard.
type limiterGuard interface {
	admission.Guard
	Limiter() *runlimit.Limiter
}

// Status reads the page's sources now.
func (p *Page) Status() Status {
	clock := p.now
	if clock == nil { // the zero Page
		clock = time.Now
	}
	now := clock()
	st := Status{Time: now, RunLimits: []RunLimit{}, Signals: []Signal{}, RefusalCounts: []RefusalCount{}, Refusals: p.refusals()}
	var sheds []admission.Guard
	if e := p.src.Engine; e != nil {
		runs := map[*runlimit.Limiter]bool{}
		shed := map[*memshed.Shedder]bool{}
		rules, _ := e.Rules()
		for _, r := range rules {
			for _, g := range r.Guards {
				switch g := g.(type) {
				case limiterGuard:
					if l := g.Limiter(); l != nil && !runs[l] {
						runs[l] = true
						st.RunLimits = append(st.RunLimits, runLimit(g.Name(), l))
						st.Signals = append(st.Signals, runSignals(g.Name(), l, now)...)
					}
				case *memshed.Shedder:
					if !shed[g] {
						shed[g] = true
						sheds = append(sheds, g)
					}
				}
			}
		}
		for _, c := range e.RefusalCounts() {
			st.RefusalCounts = append(st.RefusalCounts, RefusalCount{Guard: c.Guard, Reason: string(c.Reason), Evidence: c.Evidence.String(), Count: c.Count})
		}
	}
	for _, g := range sheds {
		st.Signals = append(st.Signals, shedSignals(g.(*memshed.Shedder))...)
	}
	if c := p.src.CPU; c != nil {
		st.Signals = append(st.Signals, Signal{Source: "cpu", Name: "saturated", Value: c.Utilization(), Threshold: c.Threshold(), Unit: "fraction", Evidence: c.Saturated()})
	}
	if m := p.src.Memory; m != nil {
		st.Signals = append(st.Signals, Signal{Source: "memory", Name: "saturated", Value: m.Projected(), Threshold: m.Threshold(), Unit: "fraction", Evidence: m.Saturated()})
	}
	return st
}

// refusals returns the refusals kept, newest first.
func (p *Page) refusals() []Refusal {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(p.n, MaxRefusals)
	out := make([]Refusal, 0, n)
	for i := range n {
		out = append(out, p.ring[(p.n-1-i)%MaxRefusals])
	}
	return out
}

const ms = float64(time.Millisecond)

func runLimit(name string, l *runlimit.Limiter) RunLimit {
	s := l.Stats()
	floor, ceiling := l.Bounds()
	rl := RunLimit{Guard: name, Limit: s.Limit, Floor: floor, Ceiling: ceiling, Running: s.Running, Waiting: s.Waiting, Tenants: l.Tenants(), Moves: []Move{}}
	flows := append(l.Flows(), l.SharedFlows()...)
	type flowAt struct {
		f       *runlimit.Flow
		lanes   []*runlimit.Lane
		waiting int
	}
	all := make([]flowAt, 0, len(flows))
	for _, f := range flows {
		// Every lane counts in Waiting; the page shows the busiest.
		lanes := f.WaitingLanes(math.MaxInt)
		w := 0
		for _, ln := range lanes {
			w += ln.Held()
		}
		if len(lanes) > MaxLanes {
			slices.SortFunc(lanes, func(a, b *runlimit.Lane) int { return cmp.Compare(b.Held(), a.Held()) })
			lanes = lanes[:MaxLanes]
		}
		if f.ServiceTime() == 0 && w == 0 && (f.Name() == runlimit.UnservedFlow || f.Name() == runlimit.OverflowFlow) {
			continue // a shared flow no call used
		}
		all = append(all, flowAt{f, lanes, w})
	}
	slices.SortFunc(all, func(a, b flowAt) int {
		return cmp.Or(cmp.Compare(b.waiting, a.waiting), strings.Compare(a.f.Name(), b.f.Name()))
	})
	if len(all) > MaxFlows {
		rl.FlowsLeft = len(all) - MaxFlows
		all = all[:MaxFlows]
	}
	rl.Flows = make([]Flow, 0, len(all))
	for _, fa := range all {
		f := fa.f
		fl := Flow{Name: cut(f.Name()), ServiceTimeMS: float64(f.ServiceTime()) / ms, BaselineMS: float64(f.Baseline()) / ms,
			QueueTargetMS: float64(f.QueueTarget()) / ms, Waiting: fa.waiting}
		for _, ln := range fa.lanes {
			fl.Lanes = append(fl.Lanes, Lane{Tenant: cut(ln.Tenant()), Class: ln.Class().String(), Waiting: ln.Held()})
		}
		slices.SortFunc(fl.Lanes, func(a, b Lane) int {
			return cmp.Or(cmp.Compare(b.Waiting, a.Waiting), strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.Class, b.Class))
		})
		rl.Flows = append(rl.Flows, fl)
	}
	moves := l.Moves()
	for i := len(moves) - 1; i >= 0; i-- {
		m := moves[i]
		rl.Moves = append(rl.Moves, Move{Time: m.At, From: m.From, To: m.To, Cause: string(m.Cause), Probe: m.Probe})
	}
	return rl
}

// units of the run limit's signals (see runlimit.Signal).
var runUnits = map[admission.Evidence]string{
	admission.EvidenceCPU:      "fraction",
	admission.EvidenceOverrun:  "calls",
	admission.EvidenceStanding: "ms",
	admission.EvidenceSpike:    "calls",
}

func runSignals(name string, l *runlimit.Limiter, now time.Time) []Signal {
	var out []Signal
	for _, s := range l.Signals(now) {
		out = append(out, Signal{Source: name, Name: s.Evidence.String(), Value: s.Value, Threshold: s.Threshold, Unit: runUnits[s.Evidence], Evidence: s.Holds})
	}
	return out
}

func shedSignals(g *memshed.Shedder) []Signal {
	s := g.Stats()
	return []Signal{
		{Source: g.Name(), Name: "memory", Value: s.Projected, Threshold: s.Threshold, Unit: "fraction", Evidence: s.Projected >= s.Threshold},
		{Source: g.Name(), Name: "gc", Value: s.GC, Threshold: s.GCThreshold, Unit: "fraction", Evidence: s.GC >= s.GCThreshold},
		{Source: g.Name(), Name: "hard", Value: s.Hard, Threshold: memshed.EmergencyAt, Unit: "fraction", Evidence: s.Hard >= memshed.EmergencyAt},
		{Source: g.Name(), Name: "pressure", Value: boolValue(s.Pressure), Threshold: 1, Unit: "bool", Evidence: s.Pressure},
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ServeHTTP writes the page: text (text/plain), or JSON with
// ?format=json. Any other format is a 400. A page JSON cannot carry (a
// figure that is NaN or infinite, from a signal of one's own) is a 500
// that says so; the text form shows it.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch format := r.URL.Query().Get("format"); format {
	case "", "text":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_ = WriteText(w, p.Status())
	case "json":
		b, err := json.MarshalIndent(p.Status(), "", "  ")
		if err != nil {
			http.Error(w, "statuspage: the page has no JSON form now (see its text form): "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(b, '\n'))
	default:
		http.Error(w, "statuspage: format must be text or json, got "+quote(format), http.StatusBadRequest)
	}
}

// finiteOr0 is v, or 0 if v is NaN or infinite, as a refusal's ErrorInfo
// gives it: a refusal kept on the page must not take its JSON form away.
func finiteOr0(v float32) float64 {
	if f := float64(v); !math.IsNaN(f) && !math.IsInf(f, 0) {
		return f
	}
	return 0
}
