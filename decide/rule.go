package decide

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/levee-go/levee/admission"
)

// Rule applies guards to the calls of some methods.
//
// Methods are patterns: an exact full method name ("/pkg.Service/Method"),
// a service wildcard ("/pkg.Service/*"), or "*" for every method no other
// rule names (the default rule). An empty Methods means "*". A call is
// governed by the rule of its exact name, else of its service, else by the
// default rule, else by none.
//
// The zero Rule governs every method and has no guards, which New
// rejects: a rule needs at least one guard. New (and Swap) copy the rule,
// so changing one afterwards changes nothing in force; the functions and
// guards it holds are shared, and are called from many goroutines at once
// (see KeyFunc, Criticality, admission.Guard).
type Rule struct {
	// Name labels the rule in Stats; default: its first method pattern.
	Name string
	// Methods are the patterns the rule governs; see Rule.
	Methods []string
	// Key extracts the key of per-key guards (admission.Call.Key); nil:
	// no key.
	Key KeyFunc
	// Tenant extracts the call's tenant (admission.Call.Tenant), among
	// whom guards that share capacity fairly share it, such as the run
	// limit (runlimit.Lane): HeaderKey("x-tenant-id"), or TLSIdentityKey
	// for a tenant the caller must prove. nil: no tenants.
	Tenant KeyFunc
	// Criticality says how the rule reads each call's criticality class
	// (admission.Call.Class); nil: every call is Critical.
	Criticality *Criticality
	// Guards are the rule's guards, at most admission.MaxGuards. They run
	// cheapest first by their declared cost (admission.Traits), guards of
	// equal cost in the order given; a refusal gives back what earlier
	// guards granted.
	Guards []admission.Guard
	// Code is the code of a refusal: ResourceExhausted when zero, or
	// Unavailable. A refusal for a deadline that cannot be met is always
	// DeadlineExceeded.
	Code Code
	// Shadow computes and counts every decision but refuses nothing, so a
	// policy can be tried on live traffic first.
	Shadow bool
}

// Compiled is a Rule in force: its chain of guards (admission.Chain,
// embedded), with what the engine reads of a call for it. An Engine's
// Match returns it; a front-end keeps it from a call's admission to its
// finish, so that a Swap never splits a call between two rules. It is
// safe for concurrent use. The zero Compiled has no chain and is not
// usable: get one from Engine.Match.
type Compiled struct {
	*admission.Chain
	src    Rule // as given, for Engine.Rules
	key    KeyFunc
	tenant KeyFunc
	crit   *Criticality
	code   Code
	guards []admission.Guard // as given, to recognise the rule in a Swap
	shadow bool
}

// Rule returns the rule as it was given (its name filled in).
func (r *Compiled) Rule() Rule { return r.src }

// Code returns the code of the rule's refusals (ResourceExhausted or
// Unavailable; DeadlineExceeded replaces it for a deadline refusal).
func (r *Compiled) Code() Code { return r.code }

// Classifies reports whether the rule reads a criticality class: a
// front-end that propagates a call's class to the calls it makes sends
// the class the rule gave it (a claim it did not trust, lowered) only
// then.
func (r *Compiled) Classifies() bool { return r.crit != nil }

// Fill sets c to the call f describes, seen at now, as the rule reads
// it: method, deadline and stream kind from f, and the key, tenant and
// class the rule's KeyFuncs and Criticality compute from f. It fills c in
// place (a Call returned by value is copied through memory, which on an
// admitted path costs more than the fields) and allocates nothing when
// the KeyFuncs and f's Lookup do not.
func (r *Compiled) Fill(f Facts, now time.Time, c *admission.Call) {
	*c = admission.Call{
		Ctx:           f.Ctx,
		Method:        f.Method,
		Now:           now,
		Deadline:      f.Deadline,
		Class:         admission.Critical,
		Stream:        f.Kind.Stream(),
		ClientStream:  f.Kind.ClientSends(),
		StreamUnknown: f.Kind == UnknownKind,
	}
	r.Describe(f, c)
}

// Describe sets c's key, tenant and class from f, as the rule reads
// them, and leaves c's other fields alone.
func (r *Compiled) Describe(f Facts, c *admission.Call) {
	if r.key != nil {
		c.Key = r.key(f)
	}
	if r.tenant != nil {
		c.Tenant = r.tenant(f)
	}
	if r.crit != nil {
		c.Class = r.crit.class(f)
	}
}

// compileRule compiles r, reusing the chain of a rule of old (nil: none)
// with the same name, guards and shadow mode, so that its counts go on.
func compileRule(r Rule, old *ruleSet, reused map[*admission.Chain]bool) (*Compiled, error) {
	name := r.Name
	if name == "" {
		name = "*"
		if len(r.Methods) > 0 {
			name = r.Methods[0]
		}
	}
	code := r.Code
	switch code {
	case OK:
		code = ResourceExhausted
	case ResourceExhausted, Unavailable:
	default:
		return nil, fmt.Errorf("decide: rule %q: Code: want ResourceExhausted (8) or Unavailable (14), got %v", name, code)
	}
	var crit *Criticality
	if r.Criticality != nil {
		if err := r.Criticality.validate(name); err != nil {
			return nil, err
		}
		crit = r.Criticality.compile()
	}
	cr := &Compiled{src: r, key: r.Key, tenant: r.Tenant, crit: crit, code: code, guards: append([]admission.Guard(nil), r.Guards...), shadow: r.Shadow}
	cr.src.Name, cr.src.Methods, cr.src.Guards = name, append([]string(nil), r.Methods...), cr.guards
	if prev := old.same(name, r, reused); prev != nil {
		cr.Chain = prev.Chain
		reused[prev.Chain] = true
		return cr, nil
	}
	ch, err := admission.NewChain(name, r.Guards, admission.WithShadow(r.Shadow))
	if err != nil {
		return nil, fmt.Errorf("decide: %w", err)
	}
	cr.Chain = ch
	return cr, nil
}

// sameGuard reports whether a and b are the same guard: equal values of
// one comparable type (a guard that is not comparable is never the same,
// rather than a panic). A type may be comparable and a value of it not
// (a struct whose interface field holds a func, map or slice: == panics
// then), so the comparison recovers.
func sameGuard(a, b admission.Guard) (same bool) {
	ta := reflect.TypeOf(a)
	if ta != reflect.TypeOf(b) || ta == nil || !ta.Comparable() {
		return false
	}
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// ruleSet selects the rule of a method.
type ruleSet struct {
	exact     map[string]*Compiled // nil value: exempt
	services  map[string]*Compiled // by "/pkg.Service"; nil value: exempt
	def       *Compiled            // the default rule ("*"); nil: none, or exempt
	allExempt bool                 // "*" is exempt (def is nil then)
	all       []*Compiled
	exempt    []string // the exempt patterns, as given
}

// same returns the rule of s named name whose guards and shadow mode are
// r's and whose chain is not in reused (two rules of one name would share
// one chain, and its counts twice), or nil. s may be nil.
func (s *ruleSet) same(name string, r Rule, reused map[*admission.Chain]bool) *Compiled {
	if s == nil {
		return nil
	}
	for _, old := range s.all {
		if old.Name() != name || old.shadow != r.Shadow || len(old.guards) != len(r.Guards) || reused[old.Chain] {
			continue
		}
		same := true
		for i, g := range r.Guards {
			if !sameGuard(old.guards[i], g) {
				same = false
				break
			}
		}
		if same {
			return old
		}
	}
	return nil
}

func (s *ruleSet) match(method string) *Compiled {
	if r, ok := lookupMethod(s.exact, s.services, method); ok {
		return r
	}
	return s.def
}

// lookupMethod finds method ("/pkg.Service/Method") in exact, else its
// service ("/pkg.Service") in services.
func lookupMethod[V any](exact, services map[string]V, method string) (V, bool) {
	if v, ok := exact[method]; ok {
		return v, true
	}
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		if v, ok := services[method[:i]]; ok {
			return v, true
		}
	}
	var zero V
	return zero, false
}

// add registers pattern for r (nil r: exempt). Exemptions are added first
// and a rule cannot take a pattern already taken.
func (s *ruleSet) add(pattern string, r *Compiled) error {
	name := "exemption"
	if r != nil {
		name = fmt.Sprintf("rule %q", r.Name())
	}
	switch {
	case pattern == "*":
		if s.def != nil || s.allExempt {
			return taken(name, pattern, s.def)
		}
		s.def, s.allExempt = r, r == nil
		return nil
	case !strings.HasPrefix(pattern, "/") || strings.Count(pattern, "/") != 2 || strings.HasSuffix(pattern, "/"):
		return fmt.Errorf("decide: %s: method pattern %q is not \"/pkg.Service/Method\", \"/pkg.Service/*\" or \"*\"", name, pattern)
	case strings.HasSuffix(pattern, "/*"):
		svc := strings.TrimSuffix(pattern, "/*")
		if old, ok := s.services[svc]; ok {
			return taken(name, pattern, old)
		}
		s.services[svc] = r
	default:
		if strings.Contains(pattern, "*") {
			return fmt.Errorf("decide: %s: method pattern %q: '*' is allowed only as the whole method", name, pattern)
		}
		if old, ok := s.exact[pattern]; ok {
			return taken(name, pattern, old)
		}
		s.exact[pattern] = r
	}
	return nil
}

func taken(name, pattern string, old *Compiled) error {
	by := "an exemption"
	if old != nil {
		by = fmt.Sprintf("rule %q", old.Name())
	}
	return fmt.Errorf("decide: %s: method pattern %q is already taken by %s", name, pattern, by)
}
