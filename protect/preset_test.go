package protect_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/policy"
	"github.com/levee-go/levee/protect"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/runlimit"
)

// fakeCPU is a CPU signal both builds are given, so that neither detects
// one of its own.
type fakeCPU struct{}

func (fakeCPU) Utilization() float64 { return 0 }
func (fakeCPU) Saturated() bool      { return false }

// fakeMemory is a memory signal both builds are given: limited or not.
type fakeMemory struct{ limited bool }

func (fakeMemory) Projected() float64       { return 0.3 }
func (fakeMemory) HardUtilization() float64 { return 0.3 }
func (fakeMemory) HardLimit() uint64        { return 1 << 30 }
func (fakeMemory) GCFraction() float64      { return 0.01 }
func (f fakeMemory) Limited() bool          { return f.limited }

// describeChain prints a guard chain as the guards' parameters and the
// rules' structure: everything that protect.New and a policy's preset
// must build alike. Learned state (limits, tokens, service times) is left
// out.
func describeChain(t *testing.T, rules []decide.Rule, exempt []string, tenants []string) string {
	t.Helper()
	var b strings.Builder
	ex := append([]string(nil), exempt...)
	sort.Strings(ex)
	fmt.Fprintf(&b, "exempt %q\n", ex)
	for _, r := range rules {
		code := r.Code
		if code == decide.OK {
			code = decide.ResourceExhausted
		}
		fmt.Fprintf(&b, "rule %q methods %q code %v shadow %t key %t tenant %t", r.Name, r.Methods, code, r.Shadow, r.Key != nil, r.Tenant != nil)
		if c := r.Criticality; c != nil {
			fmt.Fprintf(&b, " criticality default %v methods %v trusted %t", c.Default, c.Methods, c.Trusted != nil)
		}
		b.WriteString("\n")
		for _, g := range r.Guards {
			fmt.Fprintf(&b, "  guard %q %s", g.Name(), reflect.TypeOf(g))
			if d, ok := g.(admission.Describer); ok {
				fmt.Fprintf(&b, " %+v", d.Traits())
			}
			switch v := g.(type) {
			case interface{ Limiter() *runlimit.Limiter }:
				l := v.Limiter()
				floor, ceiling := l.Bounds()
				fmt.Fprintf(&b, " bounds [%d, %d] cpu %t", floor, ceiling, l.CPU() != nil)
				for _, tn := range tenants {
					fmt.Fprintf(&b, " weight(%s) %v", tn, l.TenantWeight(tn))
				}
			case interface{ Limiter() *ratelimit.Limiter }:
				fmt.Fprintf(&b, " rate %v burst %d", v.Limiter().Limit(), v.Limiter().Burst())
			case interface{ Keyed() *ratelimit.Keyed }:
				fmt.Fprintf(&b, " rate %v burst %d", v.Keyed().Limit(), v.Keyed().Burst())
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// TestPresetSameChainAsPolicy builds the preset with protect.New and with
// a policy file's preset section, for every preset option both can
// express, and requires the same chain: guards, their order and
// parameters, rules, codes and exemptions.
func TestPresetSameChainAsPolicy(t *testing.T) {
	const m = "/pkg.Svc/M"
	tests := []struct {
		name    string
		opts    []protect.Option
		yaml    string
		tenants []string
		mem     *fakeMemory // nil: a signal without a limit
		wantMem bool        // the chain has the memory guard
	}{
		{name: "empty", yaml: "preset: {}\n"},
		{name: "memory limit", yaml: "preset: {}\n", mem: &fakeMemory{limited: true}, wantMem: true},
		{name: "memory limit, memory off", opts: []protect.Option{protect.WithoutMemory()}, yaml: "preset: {memory: false}\n", mem: &fakeMemory{limited: true}},
		{name: "max rate", opts: []protect.Option{protect.WithMaxRate(250)}, yaml: "preset: {max_rate: 250/s}\n"},
		{name: "max rate small", opts: []protect.Option{protect.WithMaxRate(5)}, yaml: "preset: {max_rate: 5/s}\n"},
		{name: "max concurrency", opts: []protect.Option{protect.WithMaxConcurrency(6)}, yaml: "preset: {max_concurrency: 6}\n"},
		{name: "client rate", opts: []protect.Option{protect.WithClientRate(40)}, yaml: "preset: {client_rate: 40/s}\n"},
		{name: "code", opts: []protect.Option{protect.WithCode(codes.Unavailable)}, yaml: "preset: {code: UNAVAILABLE}\n"},
		{name: "method rate", opts: []protect.Option{protect.WithMethod(m, protect.Method{MaxRate: 30})}, yaml: "preset:\n  methods:\n    " + m + ": {max_rate: 30/s}\n"},
		{name: "method exempt", opts: []protect.Option{protect.WithMethod(m, protect.Method{Exempt: true})}, yaml: "preset:\n  methods:\n    " + m + ": {exempt: true}\n"},
		{
			name:    "tenants",
			opts:    []protect.Option{protect.WithTenants(decide.HeaderKey("x-tenant-id"), map[string]float64{"a": 3})},
			yaml:    "preset: {}\ntenants:\n  header: x-tenant-id\n  weights: {a: 3}\n",
			tenants: []string{"a", "b"},
		},
		{
			name: "criticality",
			opts: []protect.Option{protect.WithCriticality(decide.Criticality{Default: admission.Sheddable, Methods: map[string]admission.Criticality{m: admission.CriticalPlus}})},
			yaml: "preset: {}\ncriticality:\n  default: sheddable\n  methods:\n    " + m + ": critical_plus\n",
		},
		{
			name: "all together",
			opts: []protect.Option{protect.WithMaxRate(1000), protect.WithMaxConcurrency(3), protect.WithClientRate(100), protect.WithCode(codes.Unavailable),
				protect.WithMethod(m, protect.Method{MaxRate: 7}), protect.WithMethod("/pkg.Svc/N", protect.Method{Exempt: true})},
			yaml: "preset:\n  max_rate: 1000/s\n  max_concurrency: 3\n  client_rate: 100/s\n  code: UNAVAILABLE\n  methods:\n    " + m + ": {max_rate: 7/s}\n    /pkg.Svc/N: {exempt: true}\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := fakeMemory{}
			if tt.mem != nil {
				mem = *tt.mem
			}
			p, err := protect.New(append([]protect.Option{protect.WithCPU(fakeCPU{}), protect.WithMemory(mem)}, tt.opts...)...)
			if err != nil {
				t.Fatalf("protect.New: %v", err)
			}
			defer p.Stop()
			path := filepath.Join(t.TempDir(), "policy.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			r, err := policy.NewReloader(path, policy.WithCPU(fakeCPU{}), policy.WithMemory(mem), policy.WithLogf(func(string, ...any) {}))
			if err != nil {
				t.Fatalf("policy.NewReloader(%q): %v", tt.yaml, err)
			}
			defer r.Close()
			pr, pe := p.Guard().Rules()
			rr, re := r.Server().Rules()
			want, got := describeChain(t, pr, pe, tt.tenants), describeChain(t, rr, re, tt.tenants)
			if got != want {
				t.Errorf("policy %q builds\n%s\nprotect.New builds\n%s", tt.yaml, got, want)
			}
			if !strings.Contains(want, `guard "run"`) || !strings.Contains(want, `guard "deadline"`) {
				t.Errorf("chain lacks the preset's guards:\n%s", want)
			}
			if got := strings.Contains(want, `guard "memory"`); got != tt.wantMem {
				t.Errorf("memory guard in the chain: %t, want %t:\n%s", got, tt.wantMem, want)
			}
		})
	}
}

// TestPresetSameCPUTuning: with no CPU signal given, protect.New and a
// policy Reloader each start a monitor with the preset's tuning.
func TestPresetSameCPUTuning(t *testing.T) {
	p, err := protect.New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte("preset: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := policy.NewReloader(path, policy.WithLogf(func(string, ...any) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pm, rm := p.CPU(), r.CPU()
	if (pm == nil) != (rm == nil) {
		t.Fatalf("protect.New CPU() = %v, Reloader CPU() = %v: want both or neither", pm, rm)
	}
	if pm == nil {
		t.Fatal("no CPU source detected on this machine: the test cannot compare the monitors' tuning")
	}
	if pm.Interval() != rm.Interval() || pm.Smoothing() != rm.Smoothing() {
		t.Errorf("monitor tuning: protect.New %v/%v, Reloader %v/%v; want equal", pm.Interval(), pm.Smoothing(), rm.Interval(), rm.Smoothing())
	}
}

// TestNoMemoryLimitNoChange: a server far from any memory limit — a
// memory signal that is not Limited — gets exactly the chain it gets with
// the memory signal off, and a limited one gets the memory guard after
// the run limit.
func TestNoMemoryLimitNoChange(t *testing.T) {
	chain := func(opts ...protect.Option) string {
		p, err := protect.New(append([]protect.Option{protect.WithCPU(fakeCPU{})}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop()
		rules, exempt := p.Guard().Rules()
		return describeChain(t, rules, exempt, nil)
	}
	off, unlimited := chain(protect.WithoutMemory()), chain(protect.WithMemory(fakeMemory{}))
	if off != unlimited {
		t.Errorf("no memory limit builds\n%s\nmemory off builds\n%s", unlimited, off)
	}
	limited := chain(protect.WithMemory(fakeMemory{limited: true}))
	run, mem := strings.Index(limited, `guard "run"`), strings.Index(limited, `guard "memory"`)
	if mem < 0 || mem < run {
		t.Errorf("with a memory limit, want the memory guard after the run limit:\n%s", limited)
	}
}

// TestPresetSameMemoryMonitor: with no memory signal given, protect.New
// and a policy Reloader each start a memory monitor, with the preset's
// tuning.
func TestPresetSameMemoryMonitor(t *testing.T) {
	p, err := protect.New(protect.WithCPU(fakeCPU{}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte("preset: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := policy.NewReloader(path, policy.WithCPU(fakeCPU{}), policy.WithLogf(func(string, ...any) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pm, rm := p.Memory(), r.Memory()
	if pm == nil || rm == nil {
		t.Fatalf("protect.New Memory() = %v, Reloader Memory() = %v: want both", pm, rm)
	}
	if ps, rs := pm.Stats(), rm.Stats(); ps.Source != rs.Source || ps.Limited != rs.Limited {
		t.Errorf("memory monitors: protect.New %q limited %t, Reloader %q limited %t", ps.Source, ps.Limited, rs.Source, rs.Limited)
	}
	if (p.MemoryGuard() != nil) != pm.Limited() {
		t.Errorf("MemoryGuard() = %v with Limited() %t: want a guard exactly when limited", p.MemoryGuard(), pm.Limited())
	}
}
