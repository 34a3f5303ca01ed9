package grpcguard

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// maxGuards is the most guards one rule may hold.
const maxGuards = 8

// Rule applies guards to the calls of some methods.
//
// Methods are patterns: an exact full method name ("/pkg.Service/Method"),
// a service wildcard ("/pkg.Service/*"), or "*" for every method no other
// rule names (the default rule). An empty Methods means "*". A call is
// governed by the rule of its exact name, else of its service, else by the
// default rule, else by none.
type Rule struct {
	// Name labels the rule in Stats; default: its first method pattern.
	Name string
	// Methods are the patterns the rule governs; see Rule.
	Methods []string
	// Key extracts the key of per-key guards (PerKey); nil: no key.
	Key KeyFunc
	// Guards are the rule's guards, at most 8. They run cheapest first
	// (deadline, queue delay, shedding, rate, per-key rate, concurrency,
	// then custom guards, each class in the order given); a refusal gives
	// back what earlier guards granted.
	Guards []Guard
	// Code is the status of a refusal: RESOURCE_EXHAUSTED when zero, or
	// UNAVAILABLE, say. Deadline refusals always end with DEADLINE_EXCEEDED.
	Code codes.Code
	// Shadow computes and counts every decision but refuses nothing, so a
	// policy can be tried on live traffic first.
	Shadow bool
}

// KeyFunc extracts a call's key for per-key guards. md is the call's
// incoming metadata when it is at hand without a copy (in the transport's
// tap), and nil otherwise (read it from ctx then).
type KeyFunc func(ctx context.Context, md metadata.MD) string

// HeaderKey keys calls by the first value of a metadata header, such as
// "x-tenant-id" (case-insensitive). Calls without it share the key "".
func HeaderKey(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, md metadata.MD) string {
		if md != nil {
			if v := md[name]; len(v) > 0 {
				return v[0]
			}
			return ""
		}
		if v := metadata.ValueFromIncomingContext(ctx, name); len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

// PeerKey keys calls by the client's IP address (without the port).
//
// grpc-go gives every stream of a TCP connection the same address value,
// so the returned KeyFunc formats each connection's address once and then
// finds it without allocating. It remembers at most MaxPeerKeys
// connections (a small address each, not the connection) and forgets them
// all when it has seen more, which also drops those that have closed.
// Addresses of other kinds are formatted per call. Each call of PeerKey
// returns a KeyFunc with its own memory.
func PeerKey() KeyFunc {
	c := new(peerKeys)
	return func(ctx context.Context, _ metadata.MD) string {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return ""
		}
		if a, ok := p.Addr.(*net.TCPAddr); ok {
			return c.key(a)
		}
		return addrHost(p.Addr)
	}
}

// MaxPeerKeys is how many connections a PeerKey remembers.
const MaxPeerKeys = 8192

// peerKeys maps each connection's address to its formatted IP.
type peerKeys struct {
	m sync.Map // *net.TCPAddr → string
	n atomic.Int64
}

func (c *peerKeys) key(a *net.TCPAddr) string {
	if k, ok := c.m.Load(a); ok {
		return k.(string)
	}
	k := a.IP.String()
	if c.n.Add(1) > MaxPeerKeys {
		c.m.Clear()
		c.n.Store(1)
	}
	c.m.Store(a, k)
	return k
}

// addrHost is the host part of an address that is not a *net.TCPAddr.
func addrHost(a net.Addr) string {
	s := a.String()
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return s
}

// rule is a compiled Rule.
type rule struct {
	name     string
	key      KeyFunc
	guards   []Guard
	recheck  []int // indexes of guards that are Recheckers
	starters []int // indexes of guards that are Starters
	code     codes.Code
	shadow   bool
	timed    bool   // some guard's Finish uses the duration
	quiet    uint32 // guards whose Finish matters only for skipped calls
	// passed counts the calls that passed every guard: their handler
	// started (server) or they were sent (client). It is the one counter
	// the admitted path adds to; the calls that reached the rule are
	// derived from it (see stats).
	passed atomic.Uint64
	// abandoned counts the calls admitted by the tap whose stream ended
	// before their handler started.
	abandoned atomic.Uint64
	counters  []counters
	quick     []quickGuard    // per guard; nil for guards without the quick path
	quickFin  []quickFinisher // per guard; nil for guards without the quick path
}

func compileRule(r Rule) (*rule, error) {
	name := r.Name
	if name == "" {
		name = "*"
		if len(r.Methods) > 0 {
			name = r.Methods[0]
		}
	}
	if len(r.Guards) == 0 {
		return nil, fmt.Errorf("grpcguard: rule %q has no guards", name)
	}
	if len(r.Guards) > maxGuards {
		return nil, fmt.Errorf("grpcguard: rule %q has %d guards, at most %d allowed", name, len(r.Guards), maxGuards)
	}
	for i, g := range r.Guards {
		if g == nil {
			return nil, fmt.Errorf("grpcguard: rule %q: guard %d is nil", name, i)
		}
	}
	code := r.Code
	if code == codes.OK {
		code = codes.ResourceExhausted
	}
	guards := append([]Guard(nil), r.Guards...)
	sort.SliceStable(guards, func(i, j int) bool { return guardCost(guards[i]) < guardCost(guards[j]) })
	cr := &rule{name: name, key: r.Key, guards: guards, code: code, shadow: r.Shadow, counters: make([]counters, len(guards))}
	for i, g := range guards {
		if _, ok := g.(Rechecker); ok {
			cr.recheck = append(cr.recheck, i)
		}
		if _, ok := g.(Starter); ok {
			cr.starters = append(cr.starters, i)
		}
		cr.timed = cr.timed || guardTimed(g)
		var q quickGuard
		var qf quickFinisher
		if builtin(g) {
			q, _ = g.(quickGuard)
			qf, _ = g.(quickFinisher)
			if _, ok := g.(skippedOnly); ok {
				cr.quiet |= 1 << i
			}
		}
		cr.quick = append(cr.quick, q)
		cr.quickFin = append(cr.quickFin, qf)
	}
	return cr, nil
}

// admit runs the guards on c. It returns the set of guards that admitted
// (a bit per guard), and, if one refused (and the rule is not in shadow
// mode), its index and decision; earlier guards are then rolled back.
// permits must be zero: the quick path sets only the bulkhead permit of
// each guard that admits.
func (r *rule) admit(c *Call, permits *[maxGuards]Permit) (mask uint32, refused int, d Decision) {
	for i, g := range r.guards {
		if q := r.quick[i]; q != nil {
			p, ok := q.quickAdmit(c.Now, c.Key)
			if ok {
				permits[i].slot = p
				mask |= 1 << i
				continue
			}
			d = q.refusal(*c)
		} else {
			d = g.Admit(*c)
		}
		if !d.Refused {
			permits[i] = d.Permit
			mask |= 1 << i
			continue
		}
		if r.shadowed(i) {
			continue
		}
		r.rollback(i, c, mask, permits)
		return 0, i, d
	}
	return mask, -1, Decision{}
}

// recheckAt runs the Rechecker guards at the start of the handler. On a
// refusal it finishes every admitted guard as skipped.
func (r *rule) recheckAt(c *Call, mask uint32, permits *[maxGuards]Permit) (refused int, d Decision) {
	return r.atStart(c, mask, permits, r.recheck, false)
}

// startAt runs the Starter guards when the handler is about to start,
// keeping the permits they give. On a refusal it finishes every admitted
// guard as skipped.
func (r *rule) startAt(c *Call, mask uint32, permits *[maxGuards]Permit) (refused int, d Decision) {
	return r.atStart(c, mask, permits, r.starters, true)
}

// atStart runs the guards at indexes idx that admitted the call: their
// Start (keeping the permits they give) if starters, else their Recheck.
func (r *rule) atStart(c *Call, mask uint32, permits *[maxGuards]Permit, idx []int, starters bool) (refused int, d Decision) {
	for _, i := range idx {
		if mask&(1<<i) == 0 {
			continue // refused in shadow mode at admission: counted once
		}
		if starters {
			d = r.guards[i].(Starter).Start(*c)
		} else {
			d = r.guards[i].(Rechecker).Recheck(*c)
		}
		if !d.Refused {
			if starters {
				permits[i] = d.Permit
			}
			continue
		}
		if r.shadowed(i) {
			continue
		}
		r.rollback(i, c, mask, permits)
		return i, d
	}
	return -1, Decision{}
}

// shadowed counts guard i's refusal in shadow mode and reports whether
// the call goes on.
func (r *rule) shadowed(i int) bool {
	if r.shadow {
		r.counters[i].shadowRefused.Add(1)
	}
	return r.shadow
}

// rollback counts guard i's refusal and finishes the guards that admitted
// the call as skipped.
func (r *rule) rollback(i int, c *Call, mask uint32, permits *[maxGuards]Permit) {
	r.counters[i].refused.Add(1)
	r.finish(c, mask, permits, Outcome{Skipped: true})
}

// finish ends the call at every guard in mask, last admitted first.
func (r *rule) finish(c *Call, mask uint32, permits *[maxGuards]Permit, o Outcome) {
	if !o.Skipped {
		mask &^= r.quiet
	}
	for i := len(r.guards) - 1; i >= 0; i-- {
		if mask&(1<<i) == 0 {
			continue
		}
		if qf := r.quickFin[i]; qf != nil {
			qf.quickFinish(permits[i].slot, o)
		} else {
			r.guards[i].Finish(*c, permits[i], o)
		}
	}
}

// ruleSet selects the rule of a method.
type ruleSet struct {
	exact    map[string]*rule // nil value: exempt
	services map[string]*rule // by "/pkg.Service"; nil value: exempt
	def      *rule
}

func (s *ruleSet) match(method string) *rule {
	if r, ok := s.exact[method]; ok {
		return r
	}
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		if r, ok := s.services[method[:i]]; ok {
			return r
		}
	}
	return s.def
}

// add registers pattern for r (nil r: exempt). Exemptions are added first
// and a rule cannot take a pattern already taken.
func (s *ruleSet) add(pattern string, r *rule) error {
	name := "exemption"
	if r != nil {
		name = fmt.Sprintf("rule %q", r.name)
	}
	switch {
	case pattern == "*":
		if s.def != nil {
			return fmt.Errorf("grpcguard: %s: pattern \"*\" is already taken by rule %q", name, s.def.name)
		}
		s.def = r
		return nil
	case !strings.HasPrefix(pattern, "/") || strings.Count(pattern, "/") != 2 || strings.HasSuffix(pattern, "/"):
		return fmt.Errorf("grpcguard: %s: method pattern %q is not \"/pkg.Service/Method\", \"/pkg.Service/*\" or \"*\"", name, pattern)
	case strings.HasSuffix(pattern, "/*"):
		svc := strings.TrimSuffix(pattern, "/*")
		if old, ok := s.services[svc]; ok {
			return taken(name, pattern, old)
		}
		s.services[svc] = r
	default:
		if strings.Contains(pattern, "*") {
			return fmt.Errorf("grpcguard: %s: method pattern %q: '*' is allowed only as the whole method", name, pattern)
		}
		if old, ok := s.exact[pattern]; ok {
			return taken(name, pattern, old)
		}
		s.exact[pattern] = r
	}
	return nil
}

func taken(name, pattern string, old *rule) error {
	by := "an exemption"
	if old != nil {
		by = fmt.Sprintf("rule %q", old.name)
	}
	return fmt.Errorf("grpcguard: %s: method pattern %q is already taken by %s", name, pattern, by)
}

// stats derives each guard's counts. Every decided call that reached the
// rule either passed, was refused by one guard, or was abandoned before
// its handler; it reached guard i unless an earlier guard refused it (in
// shadow mode every call reaches every guard). The refusals are read
// first, then the passed and abandoned counts, then the shadow refusals: a
// call counts its refusal and shadow refusals before it passes, so in this
// order every call read has its refusals read too, and a derived Admitted
// can only fall short, by calls in flight, never overshoot.
func (r *rule) stats() []GuardStats {
	out := make([]GuardStats, len(r.guards))
	refused := make([]uint64, len(r.guards))
	shadows := make([]uint64, len(r.guards))
	var reached uint64
	for i := range r.guards {
		refused[i] = r.counters[i].refused.Load()
		reached += refused[i]
	}
	reached += r.passed.Load() + r.abandoned.Load()
	for i := range r.guards {
		shadows[i] = r.counters[i].shadowRefused.Load()
	}
	for i, g := range r.guards {
		ref, shadow := refused[i], shadows[i]
		out[i] = GuardStats{Rule: r.name, Guard: g.Name(), Refused: ref, ShadowRefused: shadow}
		var admitted uint64
		if ref+shadow <= reached {
			admitted = reached - ref - shadow
			reached -= ref // shadow refusals go on to the next guard
		}
		out[i].Admitted = atomicMax(&r.counters[i].admitted, admitted)
	}
	return out
}

// atomicMax raises m to at least v and returns the result. A shadow
// refusal is counted when the call is admitted, but the call only when it
// is decided, so a derived Admitted can dip while shadow-refused calls
// wait for their handlers; it never overshoots (see stats), so reporting
// the largest value seen keeps it a counter, exact again once those calls
// are decided.
func atomicMax(m *atomic.Uint64, v uint64) uint64 {
	for {
		old := m.Load()
		if v <= old {
			return old
		}
		if m.CompareAndSwap(old, v) {
			return v
		}
	}
}
