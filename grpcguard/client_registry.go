package grpcguard

import (
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/holdoff"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/retrybudget"
	"github.com/levee-go/levee/throttle"
)

// cowMap is a registry of named entries that calls read without a lock: a
// map that is replaced, never changed, under its owner's mutex. Past its
// cap, new names share one overflow entry. Its zero value is not usable:
// call init.
type cowMap[V comparable] struct {
	m    atomic.Pointer[map[string]V]
	over V // the overflow entry, under the owner's mutex; zero until needed
}

func (r *cowMap[V]) init() { r.m.Store(&map[string]V{}) }

// get returns the entry of name, if it has its own.
func (r *cowMap[V]) get(name string) (V, bool) {
	v, ok := (*r.m.Load())[name]
	return v, ok
}

// getOrCreate returns the entry of name, building it with build on name's
// first use, outside mu so that user callbacks never run under a lock; an
// entry built by a goroutine that lost the race is dropped. Once the
// registry holds max names, further names share the overflow entry, built
// with build(OverflowName).
func (r *cowMap[V]) getOrCreate(mu *sync.Mutex, max int, name string, build func(name string) V) V {
	var zero V
	for {
		mu.Lock()
		m := r.m.Load()
		if v, ok := (*m)[name]; ok {
			mu.Unlock()
			return v
		}
		full := len(*m) >= max
		if full && r.over != zero {
			v := r.over
			mu.Unlock()
			return v
		}
		mu.Unlock()
		bname := name
		if full {
			bname = OverflowName
		}
		v := build(bname)
		mu.Lock()
		switch {
		case r.m.Load() != m:
			// The map changed meanwhile: look again.
		case full:
			if r.over == zero {
				r.over = v
			}
			v = r.over
			mu.Unlock()
			return v
		default:
			nm := make(map[string]V, len(*m)+1)
			maps.Copy(nm, *m)
			nm[name] = v
			r.m.Store(&nm)
			mu.Unlock()
			return v
		}
		mu.Unlock()
	}
}

// lookup returns the entry of name, or the overflow entry for
// OverflowName; mu must be held.
func (r *cowMap[V]) lookup(name string) (V, bool) {
	if v, ok := r.get(name); ok {
		return v, true
	}
	var zero V
	if name == OverflowName && r.over != zero {
		return r.over, true
	}
	return zero, false
}

// all returns every entry, the overflow entry included; mu must be held.
func (r *cowMap[V]) all() []V {
	m := *r.m.Load()
	out := make([]V, 0, len(m)+1)
	for _, v := range m {
		out = append(out, v)
	}
	var zero V
	if r.over != zero {
		out = append(out, r.over)
	}
	return out
}

// entry returns the state of the pair (target, method), creating it on
// the pair's first call.
func (c *Client) entry(target, method string) *clientEntry {
	if t, ok := c.targets.get(target); ok {
		if e, ok := t.methods.get(method); ok {
			return e
		}
	}
	t := c.targets.getOrCreate(&c.mu, c.o.maxTargets, target, c.newTarget)
	return t.methods.getOrCreate(&c.mu, c.o.maxMethods, method, func(m string) *clientEntry { return c.newPair(t, m) })
}

// newTarget builds the state of a target; the limiter callback runs here,
// outside any lock.
func (c *Client) newTarget(name string) *clientTarget {
	t := &clientTarget{name: name, hold: holdoff.New(c.clock.Epoch())}
	t.methods.init()
	if c.o.attempts > 1 && c.o.budget != nil {
		b, err := retrybudget.New(c.o.budget(name)...)
		if err != nil {
			t.err = fmt.Errorf("grpcguard: WithRetryBudget: %w", err)
		} else {
			t.budget = b
		}
	}
	if c.o.limiter != nil {
		if l := c.o.limiter(name); l != nil {
			t.limit = ratelimit.NewGuard("rate", l)
		}
	}
	return t
}

// newPair builds the guards of one pair; the option callbacks run here,
// outside any lock. A configuration that cannot be built — more than 4
// guards from WithClientGuards, a nil one, options that breaker.New or
// throttle.New refuse — surfaces on the pair's first call: the pair's
// calls then fail with INTERNAL and a message naming the problem, and are
// never sent.
func (c *Client) newPair(t *clientTarget, method string) *clientEntry {
	e := &clientEntry{target: t}
	if t.err != nil {
		return e.failed(t.err)
	}
	name := t.name + " " + method
	guards := make([]admission.Guard, 0, admission.MaxGuards)
	guards = append(guards, holdoff.NewGuard("holdoff", t.hold))
	if t.limit != nil {
		guards = append(guards, t.limit)
	}
	if c.o.breaker != nil {
		bopts := append([]breaker.Option{breaker.WithClassifier(c.o.classify), breaker.WithOpenProbes(DefaultOpenProbes)}, c.o.breaker(t.name, method)...)
		brk, err := breaker.New(bopts...)
		if err != nil {
			return e.failed(fmt.Errorf("grpcguard: WithBreaker: %w", err))
		}
		e.brk = brk
	}
	if c.o.throttle != nil {
		thr, err := throttle.New(c.o.throttle(t.name, method)...)
		if err != nil {
			return e.failed(fmt.Errorf("grpcguard: WithThrottle: %w", err))
		}
		e.thr = thr
		var g admission.Guard = throttle.NewGuard("throttle", e.thr, c.judge)
		if e.brk != nil {
			g = &probedThrottle{Guard: g, thr: e.thr, brk: e.brk}
		}
		guards = append(guards, g)
	}
	if e.brk != nil {
		guards = append(guards, breaker.NewGuard("breaker", e.brk))
	}
	if c.o.guards != nil {
		extra := c.o.guards(t.name, method)
		if len(extra) > admission.MaxGuards-clientGuardsFixed {
			return e.failed(fmt.Errorf("grpcguard: WithClientGuards: %d guards for %s, at most %d allowed", len(extra), name, admission.MaxGuards-clientGuardsFixed))
		}
		guards = append(guards, extra...)
	}
	ch, err := admission.NewChain(name, guards)
	if err != nil {
		return e.failed(fmt.Errorf("grpcguard: WithClientGuards: %w", err))
	}
	e.chain = ch
	return e
}

// failed marks the pair as misconfigured: its calls fail with err.
func (e *clientEntry) failed(err error) *clientEntry {
	e.err = status.Error(codes.Internal, "levee: client misconfigured: "+err.Error())
	return e
}

// lookup returns the pair's state if it exists; target or method may be
// OverflowName.
func (c *Client) lookup(target, method string) *clientEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.targets.lookup(target)
	if !ok {
		return nil
	}
	e, _ := t.methods.lookup(method)
	return e
}

// probedThrottle is the throttle guard of a pair that also has a breaker.
// The two judge the same downstream, and while the breaker is open,
// half-open or forced open it is the stricter and the surer of the two,
// so:
//
//   - while the breaker is open or half-open the throttle lets every call
//     through to it: the breaker refuses all but its probes (those of its
//     trickle while open, breaker.WithOpenProbes, and those of half-open),
//     and the throttle, whose window after an incident holds only
//     failures, would otherwise drop nearly all of them and delay the
//     breaker's finding that the downstream is back;
//   - when a call let through so closes the breaker (its last half-open
//     probe), the throttle forgets its window (throttle.Throttle.Reset):
//     the incident is over, and its failures must not keep dropping calls
//     for a window's length while the accepts catch up.
//
// While the breaker is closed, or disabled (breaker.Breaker.Disable: it
// admits every call and judges none), it is the throttle's own guard. The breaker
// runs after the throttle (its cost is higher) and finishes before it, so
// a probe's Finish here sees the state the probe's outcome left the
// breaker in.
type probedThrottle struct {
	admission.Guard // throttle.NewGuard's
	thr             *throttle.Throttle
	brk             *breaker.Breaker
}

// probe marks the permit of a call let through while the breaker judged
// the downstream.
const probe = 1

func (g *probedThrottle) Traits() admission.Traits { return admission.TraitsOf(g.Guard) }

func (g *probedThrottle) Admit(c admission.Call) admission.Decision {
	switch g.brk.StateAt(c.Now) {
	case breaker.StateClosed, breaker.StateDisabled:
		return g.Guard.Admit(c)
	}
	return admission.Grant(admission.Permit{Value: probe})
}

func (g *probedThrottle) Finish(c admission.Call, p admission.Permit, o admission.Outcome) {
	g.Guard.Finish(c, p, o)
	if p.Value == probe && !o.Skipped && g.brk.StateAt(c.Now.Add(o.Duration)) == breaker.StateClosed {
		g.thr.Reset()
	}
}
