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
	"github.com/levee-go/levee/memory"
	"github.com/levee-go/levee/queuedelay"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/runlimit"
)

// CPUSignal is the CPU signal the preset, runlimit and loadshed guards
// follow.
//
// Deprecated: use cpu.Signal, the same interface, which WithCPU takes.
// CPUSignal will be removed in the next release.
type CPUSignal = cpu.Signal

// MemorySignal is the memory signal the preset follows.
//
// Deprecated: use memory.Signal, the same interface, which WithMemory
// takes. MemorySignal will be removed in the next release.
type MemorySignal = memory.Signal

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

// closeUnused stops the instances of b that next does not hold (next
// may be nil: all of them), and stops telling the moves of their run
// limits.
func (b *built) closeUnused(next *built) {
	if b == nil {
		return
	}
	for k, in := range b.inst {
		if next != nil && next.inst[k] == in {
			continue
		}
		if l, ok := in.Value.(*runlimit.Limiter); ok {
			l.OnMove(nil)
		}
		if in.Close != nil {
			in.Close()
		}
	}
}

// tellMoves tells e's Observer (decide.Observer.OnLimitChange) of the
// moves of every run limit of b: the preset's, and each runlimit guard's,
// by its guard's name. Telling again those a previous build made, and
// this one kept, changes nothing.
func (b *built) tellMoves(e *decide.Engine) {
	for _, in := range b.inst {
		if l, ok := in.Value.(*runlimit.Limiter); ok && in.Guard != nil {
			preset.TellMoves(e, in.Guard.Name(), l)
		}
	}
}

// builder builds policies, reusing the instances of prev.
type builder struct {
	cpu  cpu.Signal    // nil: no CPU signal
	mem  memory.Signal // nil: no memory signal
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
func build(p *Policy, hash uint64, prev *built, sig cpu.Signal, mem memory.Signal) (*built, error) {
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

// get returns the instance of identity id: the previous build's if it
// has one, else a new one from make (the zero Instance on error,
// recorded).
func (b *builder) get(id string, make func() (preset.Instance, error)) preset.Instance {
	in, err := b.instance(id, make)
	if err != nil {
		b.errs = append(b.errs, err)
		return preset.Instance{}
	}
	return in
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

func (b *builder) cpuFor(on bool) cpu.Signal {
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
	runAt, run, runID := b.ruleRun(i, r)
	runL, _ := run.Value.(*runlimit.Limiter)
	ids := make([]string, len(r.Guards))
	// The identity of the rule's chain: the engine keeps a chain, with its
	// decision counts, while the rule's name, shadow mode and guards (in
	// order) stay (decide.Engine.Swap); they stay while their identities
	// and shadow modes do.
	chainID := fmt.Sprintf("\x00chain\x00%t", r.Shadow)
	for j, g := range r.Guards {
		ids[j] = b.guardID(r.Name, g)
		if g.Type == TypeDeadline {
			// It reads the rule's run limit: a new run limit, a new
			// deadline guard.
			ids[j] += "\x00" + runID
		}
		chainID += fmt.Sprintf("\x00%t\x00%s", g.Shadow, ids[j])
	}
	for j, g := range r.Guards {
		path := fmt.Sprintf("rules[%d].guards[%d]", i, j)
		id := ids[j]
		in := run
		if j != runAt {
			in = b.get(id, func() (preset.Instance, error) { return b.guard(path, g, runL) })
		}
		inner := in.Guard
		if inner == nil {
			continue
		}
		if g.Shadow {
			// Its refusals are counted with the chain's decisions (stats):
			// a new chain, a new count.
			inner = b.get(id+"\x00shadow"+chainID, func() (preset.Instance, error) { return preset.Instance{Guard: newShadow(inner)}, nil }).Guard
			if sc, ok := inner.(interface{ shadowed() uint64 }); ok {
				b.next.shadows[[2]string{r.Name, g.Name}] = sc
			}
		}
		gr.Guards = append(gr.Guards, inner)
	}
	b.next.rules = append(b.next.rules, gr)
}

// ruleRun builds the run limit of rule i, r: its first runlimit guard,
// whose baselines (service times without contention) the rule's deadline
// guards read, wherever they are listed. It returns the guard's index in
// r.Guards, its instance (the zero Instance on error, recorded) and its
// identity; -1, the zero Instance and "" if r has no runlimit guard.
func (b *builder) ruleRun(i int, r Rule) (int, preset.Instance, string) {
	for j, g := range r.Guards {
		if g.Type != TypeRunLimit {
			continue
		}
		path := fmt.Sprintf("rules[%d].guards[%d]", i, j)
		id := b.guardID(r.Name, g)
		return j, b.get(id, func() (preset.Instance, error) { return b.guard(path, g, nil) }), id
	}
	return -1, preset.Instance{}, ""
}

// guardID is the identity of guard g of rule name: its rule and its
// identity (shadow mode aside: a shadow wraps the same instance), and a
// run limit's tenants' weights.
func (b *builder) guardID(rule string, g Guard) string {
	plain := g
	plain.Shadow = false
	id := "rule\x00" + rule + "\x00" + identity(plain)
	if g.Type == TypeRunLimit {
		id += b.tenantID // its tenants' weights are part of it
	}
	return id
}

// identity is a guard's type, name and parameters: every field of the
// decoded Guard, whose defaults are filled in.
func identity(g Guard) string { return fmt.Sprintf("%#v", g) }

// guard builds one guard of a rule; a deadline guard reads the baselines
// of run, the rule's run limit (nil: none).
func (b *builder) guard(path string, g Guard, run *runlimit.Limiter) (preset.Instance, error) {
	wrap := func(err error) error { return fmt.Errorf("policy: %s (%s %q): %w", path, g.Type, g.Name, err) }
	switch g.Type {
	case TypeRateLimit:
		l, err := ratelimit.NewLimiter(ratelimit.Limit(g.Rate), g.Burst)
		if err != nil {
			return preset.Instance{}, wrap(err)
		}
		return preset.Instance{Guard: ratelimit.NewGuard(g.Name, l), Value: l}, nil
	case TypeKeyedRateLimit:
		k, err := ratelimit.NewKeyed(ratelimit.Limit(g.Rate), g.Burst, ratelimit.WithMaxKeys(g.MaxKeys), ratelimit.WithIdleTimeout(g.IdleTimeout))
		if err != nil {
			return preset.Instance{}, wrap(err)
		}
		return preset.Instance{Guard: ratelimit.NewKeyedGuard(g.Name, k), Value: k, Close: func() { _ = k.Close() }}, nil
	case TypeBulkhead:
		bh, err := bulkhead.New(g.Limit, bulkhead.WithQueue(g.Queue), bulkhead.WithMaxWait(g.MaxWait))
		if err != nil {
			return preset.Instance{}, wrap(err)
		}
		return preset.Instance{Guard: bulkhead.NewGuard(g.Name, bh, g.RetryAfter), Value: bh}, nil
	case TypeAdaptiveBulkhead:
		a, err := bulkhead.NewAdaptive(bulkhead.WithLimitBounds(g.MinLimit, g.MaxLimit), bulkhead.WithInitialLimit(g.InitialLimit),
			bulkhead.WithLatencyCeiling(g.LatencyCeiling), bulkhead.WithProbeInterval(g.ProbeInterval),
			bulkhead.WithQueue(g.Queue), bulkhead.WithMaxWait(g.MaxWait))
		if err != nil {
			return preset.Instance{}, wrap(err)
		}
		return preset.Instance{Guard: bulkhead.NewAdaptiveGuard(g.Name, a, g.RetryAfter), Value: a}, nil
	case TypeLoadShed:
		if b.cpu == nil {
			return preset.Instance{}, wrap(errors.New("a loadshed guard follows the CPU signal, and this process has none"))
		}
		var pol loadshed.Policy = loadshed.AIMD{Threshold: g.Threshold}
		if g.ShedPolicy == "step" {
			pol = loadshed.Step{Factor: g.Factor}
		}
		c, err := loadshed.New(pol, nil)
		if err != nil {
			return preset.Instance{}, wrap(err)
		}
		if err := c.Follow(b.cpu, cpu.DefaultInterval); err != nil {
			c.Close()
			return preset.Instance{}, wrap(err)
		}
		return preset.Instance{Guard: loadshed.NewGuard(g.Name, c, g.RetryAfter), Value: c, Close: c.Close}, nil
	case TypeDeadline:
		dl, err := preset.NewDeadline(run, deadline.WithMargin(g.Margin))
		if err != nil {
			return preset.Instance{}, wrap(err)
		}
		return preset.Instance{Guard: namedDeadline{dl, g.Name}, Value: dl}, nil
	case TypeQueueDelay:
		q, err := queuedelay.New(g.Target, g.Interval)
		if err != nil {
			return preset.Instance{}, wrap(err)
		}
		return preset.Instance{Guard: namedQueue{q, g.Name}, Value: q}, nil
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
			return preset.Instance{}, wrap(err)
		}
		return preset.Instance{Guard: runlimit.NewGuard(g.Name, l), Value: l}, nil
	}
	return preset.Instance{}, wrap(fmt.Errorf("unknown guard type %q", g.Type))
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
