package decide

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/admission"
)

// DefaultExempt are the method patterns an Engine never guards, so that
// health probes and reflection are never shed: the standard health service
// and both versions of the reflection service.
var DefaultExempt = []string{
	"/grpc.health.v1.Health/*",
	"/grpc.reflection.v1.ServerReflection/*",
	"/grpc.reflection.v1alpha.ServerReflection/*",
}

// Option configures an Engine's rule set (New, Engine.Swap). A nil
// Option is ignored.
type Option func(*options)

type options struct {
	exempt []string
}

// WithExempt replaces the exempt method patterns (default DefaultExempt);
// WithExempt() with no pattern guards every method, health checks
// included.
func WithExempt(patterns ...string) Option {
	return func(o *options) { o.exempt = patterns }
}

// Engine decides on calls by rules, for any number of front-ends at once
// (one gRPC server, a connect-go handler, a net/http mux): it matches a
// call's method to its rule (Match), which reads the call's key, tenant
// and class from its Facts (Compiled.Fill) and runs its chain of guards;
// it tracks sustained overload (NoteRefusal) and the connections that
// retry (Retrying); it builds refusals (Compiled.Refusal) and records
// those a front-end makes (Refused, RefusedCall: RefusalCounts and the
// Observer of SetObserver).
//
// Create one with New; the zero value is not usable. An Engine is safe
// for concurrent use.
type Engine struct {
	// set is the rule set in force. Each call reads it once, when it is
	// admitted, and keeps the rule it matched until it is finished, so a
	// Swap never splits a call between two sets.
	set      atomic.Pointer[ruleSet]
	swap     sync.Mutex // serialises Swap
	overload sustained
	retrying retrying
	observer atomic.Pointer[observing] // nil: none (SetObserver)
	counts   refusalCounts
}

// New compiles rules into an Engine. It returns an error naming the rule
// and pattern when a rule has no or too many guards, a nil guard, a
// malformed method pattern, a pattern that another rule or an exemption
// already takes, a bad Criticality or a Code other than
// ResourceExhausted or Unavailable.
func New(rules []Rule, opts ...Option) (*Engine, error) {
	set, err := compileSet(rules, opts, nil)
	if err != nil {
		return nil, err
	}
	e := &Engine{}
	e.counts.seed = maphash.MakeSeed()
	e.set.Store(set)
	return e, nil
}

// Swap replaces the Engine's rules and exemptions, as New would compile
// them from rules and opts (WithExempt not given: DefaultExempt), in one
// atomic step. On error it changes nothing.
//
// Calls admitted before the swap finish under the rule that admitted them
// and give their permits back to its guards; calls admitted after it see
// only the new rules. A new rule with the same name, the same guards (the
// same instances, in the same order) and the same Shadow as a rule in
// force keeps that rule's decision counts; guards keep their own state
// whatever the rules around them, since they are the caller's instances.
// Swap is safe for concurrent use with calls and with other Swaps.
func (e *Engine) Swap(rules []Rule, opts ...Option) error {
	e.swap.Lock()
	defer e.swap.Unlock()
	set, err := compileSet(rules, opts, e.set.Load())
	if err != nil {
		return err
	}
	e.set.Store(set)
	return nil
}

// compileSet compiles rules and the exemptions of opts into a rule set,
// reusing the chains of old (which may be nil) whose rules did not
// change.
func compileSet(rules []Rule, opts []Option, old *ruleSet) (*ruleSet, error) {
	o := options{exempt: DefaultExempt}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	set := &ruleSet{exact: map[string]*Compiled{}, services: map[string]*Compiled{}}
	for _, p := range o.exempt {
		if err := set.add(p, nil); err != nil {
			return nil, err
		}
	}
	set.exempt = append([]string(nil), o.exempt...)
	reused := map[*admission.Chain]bool{} // an old chain goes on in one rule only
	for _, r := range rules {
		cr, err := compileRule(r, old, reused)
		if err != nil {
			return nil, err
		}
		methods := r.Methods
		if len(methods) == 0 {
			methods = []string{"*"}
		}
		for _, m := range methods {
			if err := set.add(m, cr); err != nil {
				return nil, err
			}
		}
		set.all = append(set.all, cr)
	}
	return set, nil
}

// Match returns the rule in force that governs method, or nil when none
// does (the method is exempt, or no rule names it and there is no
// default rule). An unknown method gets the default rule. It allocates
// nothing.
func (e *Engine) Match(method string) *Compiled { return e.set.Load().match(method) }

// Stats returns the decision counts of every guard of every rule. It
// allocates; call it at scrape time, not per call.
func (e *Engine) Stats() []admission.GuardStats {
	var out []admission.GuardStats
	for _, r := range e.set.Load().all {
		out = append(out, r.Stats()...)
	}
	return out
}

// Rules returns the rules in force, as given to New or the last Swap
// (their names filled in), and the exempt method patterns. The slices are
// copies; the guards are the instances in force.
func (e *Engine) Rules() (rules []Rule, exempt []string) {
	set := e.set.Load()
	for _, r := range set.all {
		rules = append(rules, r.src)
	}
	return rules, append([]string(nil), set.exempt...)
}

// Passed returns how many guarded calls passed every guard of their rule
// (their handlers started).
func (e *Engine) Passed() uint64 {
	var n uint64
	for _, r := range e.set.Load().all {
		n += r.Passed()
	}
	return n
}

// NoteRefusal notes a refusal decided at now and reports whether
// refusals have been sustained (SustainedAfter), so that this one should
// tell its client not to retry (Refusal.NoRetry). A refusal for a
// deadline is noted but never reported; a refusal of one key
// (Decision.PerKey) is neither, as it says nothing of the server's load.
// It is lock-free and allocates nothing.
func (e *Engine) NoteRefusal(now time.Time, d admission.Decision) bool {
	return e.overload.refused(now, d)
}

// Retrying reports whether the connection of a call refused at now
// retries: this call is a retry attempt (Facts.PreviousAttempts), or an
// earlier refused call of the same peer was. It remembers the peer of a
// retry attempt (at most a few thousand, the oldest forgotten first). It
// takes a lock and allocates; call it on refusals only.
func (e *Engine) Retrying(f Facts, now time.Time) bool {
	return e.retrying.note(f, now)
}
