package policy

import (
	"errors"
	"fmt"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/preset"
	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/queuedelay"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/runlimit"
)

// CPUSignal is the CPU signal the preset, runlimit and loadshed guards
// follow; *cpu.Monitor satisfies it.
type CPUSignal interface {
	Utilization() float64
	Saturated() bool
}

// MemorySignal is the memory signal the preset follows; *memory.Monitor
// satisfies it.
type MemorySignal interface {
	Projected() float64
	HardUtilization() float64
	HardLimit() uint64
	GCFraction() float64
	Limited() bool
}

// instance is one guard built from a policy, with what stops it.
type instance struct {
	preset.Instance
}

// built is a policy made into engine rules, with the guard instances
// behind them by identity: a guard's identity is its rule, its name, its
// type and its parameters, so that a reload reuses the instances of
// guards that did not change, with their learned state and counters.
type built struct {
	policy  *Policy
	hash    uint64
	rules   []decide.Rule
	exempt  []string
	inst    map[string]*instance
	shadows map[[2]string]shadowCounter // by rule and guard name
}

// close stops the instances of b that next does not hold (next may be
// nil: all of them).
func (b *built) closeUnused(next *built) {
	if b == nil {
		return
	}
	for k, in := range b.inst {
		if next != nil && next.inst[k] == in {
			continue
		}
		if in.Close != nil {
			in.Close()
		}
	}
}

// builder builds policies, reusing the instances of prev.
type builder struct {
	cpu  CPUSignal    // nil: no CPU signal
	mem  MemorySignal // nil: no memory signal
	prev *built
	next *built
	errs []error

	// What every rule reads of a call: its class and tenant.
	crit     *decide.Criticality
	tenant   decide.KeyFunc    // nil: no tenants
	tenantID string            // the tenants' part of a run limit's identity
	tenantOp []runlimit.Option // the tenants' options of a run limit
	// The tenants' weights, for the preset.
	tenantWeights map[string]float64
	tenantDefault float64
}

// callTraits sets what every rule reads of a call from p: its class
// (criticality) and tenant (tenants).
func (b *builder) callTraits(p *Policy) {
	b.crit = &decide.Criticality{Default: classOf(p.Criticality.Default), Methods: map[string]admission.Criticality{}}
	for _, m := range p.Criticality.Methods {
		b.crit.Methods[m.Method] = classOf(m.Class)
	}
	if t := p.Tenants; t != nil {
		b.tenant = decide.HeaderKey(t.Header)
		weights := make(map[string]float64, len(t.Weights))
		id := fmt.Sprintf("\x00tenants\x00%v", t.DefaultWeight)
		for _, w := range t.Weights {
			weights[w.Tenant] = w.Weight
			id += fmt.Sprintf("\x00%s=%v", w.Tenant, w.Weight)
		}
		b.tenantID = id
		b.tenantWeights, b.tenantDefault = weights, t.DefaultWeight
		b.tenantOp = []runlimit.Option{runlimit.WithTenantWeights(weights), runlimit.WithDefaultTenantWeight(t.DefaultWeight)}
	}
}

// classOf is the admission class of c (critical if unknown, which Decode
// does not let through).
func classOf(c Class) admission.Criticality {
	k, _ := admission.ParseCriticality(string(c))
	return k
}

// build makes p into rules. On error it stops what it started and
// returns every problem.
func build(p *Policy, hash uint64, prev *built, sig CPUSignal, mem MemorySignal) (*built, error) {
	b := &builder{cpu: sig, mem: mem, prev: prev, next: &built{
		policy:  p,
		hash:    hash,
		exempt:  append([]string(nil), p.Exempt...),
		inst:    map[string]*instance{},
		shadows: map[[2]string]shadowCounter{},
	}}
	b.callTraits(p)
	if p.Preset.Enabled {
		b.preset(p.Preset)
	}
	for i, r := range p.Rules {
		b.rule(i, r)
	}
	if err := errors.Join(b.errs...); err != nil {
		b.next.closeUnused(prev)
		return nil, err
	}
	return b.next, nil
}

// get returns the guard of identity id: the previous build's if it has
// one, else a new one from newGuard (nil on error, recorded).
func (b *builder) get(id string, newGuard func() (admission.Guard, func(), error)) admission.Guard {
	in, err := b.instance(id, func() (preset.Instance, error) {
		g, closer, err := newGuard()
		return preset.Instance{Guard: g, Close: closer}, err
	})
	if err != nil {
		b.errs = append(b.errs, err)
		return nil
	}
	return in.Guard
}

// instance returns the instance of identity id: the one this build or
// the previous one has, else a new one from make.
func (b *builder) instance(id string, make func() (preset.Instance, error)) (preset.Instance, error) {
	if in, ok := b.next.inst[id]; ok {
		return in.Instance, nil
	}
	if b.prev != nil {
		if in, ok := b.prev.inst[id]; ok {
			b.next.inst[id] = in
			return in.Instance, nil
		}
	}
	in, err := make()
	if err != nil {
		return preset.Instance{}, err
	}
	b.next.inst[id] = &instance{in}
	return in, nil
}

func (b *builder) cpuFor(on bool) runlimit.CPU {
	if !on || b.cpu == nil {
		return nil
	}
	return b.cpu
}

// preset builds the preset with the builder protect.New uses
// (internal/preset), reusing the previous build's instances by identity.
func (b *builder) preset(ps Preset) {
	spec := preset.Spec{
		MaxRate:        ps.MaxRate,
		MaxConcurrency: ps.MaxConcurrency,
		ClientRate:     ps.ClientRate,
		Code:           ps.Code,
		Shadow:         ps.Shadow,
		Criticality:    b.crit,
		Tenant:         b.tenant,
	}
	if c := b.cpuFor(ps.CPU); c != nil {
		spec.CPU = c
	}
	if ps.Memory && b.mem != nil {
		spec.Memory = b.mem
	}
	if b.tenant != nil {
		spec.TenantWeights, spec.DefaultTenantWeight = b.tenantWeights, b.tenantDefault
	}
	for _, m := range ps.Methods {
		spec.Methods = append(spec.Methods, preset.Method{Name: m.Method, Exempt: m.Exempt, MaxRate: m.MaxRate})
	}
	built, err := preset.Build(spec, func(id string, make func() (preset.Instance, error)) (preset.Instance, error) {
		return b.instance("preset\x00"+id, make)
	})
	if err != nil {
		b.errs = append(b.errs, fmt.Errorf("policy: preset.%w", err))
		return
	}
	b.next.exempt = append(b.next.exempt, built.Exempt...)
	b.next.rules = append(b.next.rules, built.Rules...)
}

func (b *builder) rule(i int, r Rule) {
	var key decide.KeyFunc
	switch r.Key.Kind {
	case KeyPeer:
		key = decide.PeerKey()
	case KeyHeader, KeyTenant:
		key = decide.HeaderKey(r.Key.Header)
	}
	gr := decide.Rule{Name: r.Name, Methods: append([]string(nil), r.Methods...), Key: key, Tenant: b.tenant, Criticality: b.crit, Code: r.Code, Shadow: r.Shadow}
	for j, g := range r.Guards {
		path := fmt.Sprintf("rules[%d].guards[%d]", i, j)
		plain := g
		plain.Shadow = false
		id := "rule\x00" + r.Name + "\x00" + identity(plain)
		if g.Type == TypeRunLimit {
			id += b.tenantID // its tenants' weights are part of it
		}
		inner := b.get(id, func() (admission.Guard, func(), error) { return b.guard(path, g) })
		if inner == nil {
			continue
		}
		if g.Shadow {
			inner = b.get(id+"\x00shadow", func() (admission.Guard, func(), error) { return newShadow(inner), nil, nil })
			if sc, ok := inner.(interface{ shadowed() uint64 }); ok {
				b.next.shadows[[2]string{r.Name, g.Name}] = sc
			}
		}
		gr.Guards = append(gr.Guards, inner)
	}
	b.next.rules = append(b.next.rules, gr)
}

// identity is a guard's type, name and parameters: every field of the
// decoded Guard, whose defaults are filled in.
func identity(g Guard) string { return fmt.Sprintf("%#v", g) }

// guard builds one guard of a rule.
func (b *builder) guard(path string, g Guard) (admission.Guard, func(), error) {
	wrap := func(err error) error { return fmt.Errorf("policy: %s (%s %q): %w", path, g.Type, g.Name, err) }
	switch g.Type {
	case TypeRateLimit:
		l, err := ratelimit.NewLimiter(ratelimit.Limit(g.Rate), g.Burst)
		if err != nil {
			return nil, nil, wrap(err)
		}
		return ratelimit.NewGuard(g.Name, l), nil, nil
	case TypeKeyedRateLimit:
		k, err := ratelimit.NewKeyed(ratelimit.Limit(g.Rate), g.Burst, ratelimit.WithMaxKeys(g.MaxKeys), ratelimit.WithIdleTimeout(g.IdleTimeout))
		if err != nil {
			return nil, nil, wrap(err)
		}
		return ratelimit.NewKeyedGuard(g.Name, k), func() { _ = k.Close() }, nil
	case TypeBulkhead:
		bh, err := bulkhead.New(g.Limit, bulkhead.WithQueue(g.Queue), bulkhead.WithMaxWait(g.MaxWait))
		if err != nil {
			return nil, nil, wrap(err)
		}
		return bulkhead.NewGuard(g.Name, bh, g.RetryAfter), nil, nil
	case TypeAdaptiveBulkhead:
		a, err := bulkhead.NewAdaptive(bulkhead.WithLimitBounds(g.MinLimit, g.MaxLimit), bulkhead.WithInitialLimit(g.InitialLimit),
			bulkhead.WithLatencyCeiling(g.LatencyCeiling), bulkhead.WithProbeInterval(g.ProbeInterval),
			bulkhead.WithQueue(g.Queue), bulkhead.WithMaxWait(g.MaxWait))
		if err != nil {
			return nil, nil, wrap(err)
		}
		return bulkhead.NewAdaptiveGuard(g.Name, a, g.RetryAfter), nil, nil
	case TypeLoadShed:
		if b.cpu == nil {
			return nil, nil, wrap(errors.New("a loadshed guard follows the CPU signal, and this process has none"))
		}
		var pol loadshed.Policy = loadshed.AIMD{Threshold: g.Threshold}
		if g.ShedPolicy == "step" {
			pol = loadshed.Step{Factor: g.Factor}
		}
		c, err := loadshed.New(pol, nil)
		if err != nil {
			return nil, nil, wrap(err)
		}
		if err := c.Follow(b.cpu, cpu.DefaultInterval); err != nil {
			c.Close()
			return nil, nil, wrap(err)
		}
		return loadshed.NewGuard(g.Name, c, g.RetryAfter), c.Close, nil
	case TypeDeadline:
		dl, err := deadline.New(deadline.WithMargin(g.Margin))
		if err != nil {
			return nil, nil, wrap(err)
		}
		return namedDeadline{dl, g.Name}, nil, nil
	case TypeQueueDelay:
		q, err := queuedelay.New(g.Target, g.Interval)
		if err != nil {
			return nil, nil, wrap(err)
		}
		return namedQueue{q, g.Name}, nil, nil
	case TypeRunLimit:
		opts := append([]runlimit.Option{runlimit.WithBounds(g.MinLimit, g.MaxLimit), runlimit.WithQueueTarget(g.QueueTarget), runlimit.WithInterval(g.Interval)}, b.tenantOp...)
		if g.InitialLimit > 0 {
			opts = append(opts, runlimit.WithInitialLimit(g.InitialLimit))
		}
		if c := b.cpuFor(g.CPU); c != nil {
			opts = append(opts, runlimit.WithCPU(c))
		}
		l, err := runlimit.New(opts...)
		if err != nil {
			return nil, nil, wrap(err)
		}
		return runlimit.NewGuard(g.Name, l), nil, nil
	}
	return nil, nil, wrap(fmt.Errorf("unknown guard type %q", g.Type))
}

// stats are the engine's decision counts, with each shadow
// guard's refusals moved from Admitted to ShadowRefused.
func (b *built) stats(s []admission.GuardStats) []admission.GuardStats {
	for i := range s {
		sc, ok := b.shadows[[2]string{s[i].Rule, s[i].Guard}]
		if !ok {
			continue
		}
		n := sc.shadowed()
		s[i].ShadowRefused += n
		s[i].Admitted -= min(n, s[i].Admitted)
	}
	return s
}
