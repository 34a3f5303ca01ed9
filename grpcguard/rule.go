package grpcguard

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/levee-go/levee/admission"
)

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

// MaxKeyLen is the longest key, in bytes, that HeaderKey and PeerKey
// return. A client chooses its header values, and per-key guards keep
// their keys (up to ratelimit.DefaultMaxKeys of them), so a longer value is
// shortened: its first MaxKeyLen-17 bytes, "#" and 16 hexadecimal digits
// of a 64-bit FNV-1a hash of the whole value. Distinct long values keep
// distinct keys (barring a hash collision), and a key costs a per-key
// guard at most MaxKeyLen bytes.
const MaxKeyLen = 128

// capKey returns k, or its shortened form when it is longer than
// MaxKeyLen (see MaxKeyLen). Only a long key allocates.
func capKey(k string) string {
	if len(k) <= MaxKeyLen {
		return k
	}
	h := fnv.New64a()
	h.Write([]byte(k))
	var b strings.Builder
	b.Grow(MaxKeyLen)
	b.WriteString(k[:MaxKeyLen-17])
	b.WriteByte('#')
	const hex = "0123456789abcdef"
	sum := h.Sum64()
	for i := 60; i >= 0; i -= 4 {
		b.WriteByte(hex[sum>>uint(i)&0xf])
	}
	return b.String()
}

// HeaderKey keys calls by the first value of a metadata header, such as
// "x-tenant-id" (case-insensitive), shortened to MaxKeyLen bytes. Calls
// without it share the key "". A name that is not ASCII once lowercased
// names no header HTTP/2 can carry: every call has the key "".
func HeaderKey(name string) KeyFunc {
	name = strings.ToLower(name)
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			// metadata.ValueFromIncomingContext would match such a name
			// to an ASCII header by Unicode case folding ("ſ" to "s")
			// where the tap's exact lookup does not.
			return func(context.Context, metadata.MD) string { return "" }
		}
	}
	return func(ctx context.Context, md metadata.MD) string {
		if md != nil {
			if v := md[name]; len(v) > 0 {
				return capKey(v[0])
			}
			return ""
		}
		if v := metadata.ValueFromIncomingContext(ctx, name); len(v) > 0 {
			return capKey(v[0])
		}
		return ""
	}
}

// PeerKey keys calls by the client's IP address (without the port), or by
// the host of an address of another kind, shortened to MaxKeyLen bytes.
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
	k := capKey(a.IP.String())
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
		return capKey(host)
	}
	return capKey(s)
}

// rule is a compiled Rule: its chain of guards, with what the transport
// adds to them.
type rule struct {
	*admission.Chain
	src    Rule // as given, for Server.Rules
	key    KeyFunc
	tenant KeyFunc
	crit   *Criticality
	code   codes.Code
	guards []admission.Guard // as given, to recognise the rule in a Swap
	shadow bool
}

// describe fills in what the transport reads of a call for the rule: its
// key, tenant and class. md is the call's incoming metadata when at hand
// (in the tap), else nil.
func (r *rule) describe(ctx context.Context, md metadata.MD, c *admission.Call) {
	if r.key != nil {
		c.Key = r.key(ctx, md)
	}
	if r.tenant != nil {
		c.Tenant = r.tenant(ctx, md)
	}
	if r.crit != nil {
		c.Class = r.crit.class(ctx, md, c.Method)
	}
}

// compileRule compiles r, reusing the chain of a rule of old (nil: none)
// with the same name, guards and shadow mode, so that its counts go on.
func compileRule(r Rule, old *ruleSet) (*rule, error) {
	name := r.Name
	if name == "" {
		name = "*"
		if len(r.Methods) > 0 {
			name = r.Methods[0]
		}
	}
	code := r.Code
	if code == codes.OK {
		code = codes.ResourceExhausted
	}
	var crit *Criticality
	if r.Criticality != nil {
		if err := r.Criticality.validate(name); err != nil {
			return nil, err
		}
		cp := *r.Criticality
		cp.Methods = make(map[string]admission.Criticality, len(r.Criticality.Methods))
		cp.services = map[string]admission.Criticality{}
		for k, v := range r.Criticality.Methods {
			if svc, ok := strings.CutSuffix(k, "/*"); ok {
				cp.services[svc] = v
			} else {
				cp.Methods[k] = v
			}
		}
		crit = &cp
	}
	cr := &rule{src: r, key: r.Key, tenant: r.Tenant, crit: crit, code: code, guards: append([]admission.Guard(nil), r.Guards...), shadow: r.Shadow}
	cr.src.Name, cr.src.Methods, cr.src.Guards = name, append([]string(nil), r.Methods...), cr.guards
	if prev := old.same(name, r); prev != nil {
		cr.Chain = prev.Chain
		return cr, nil
	}
	ch, err := admission.NewChain(name, r.Guards, admission.WithShadow(r.Shadow))
	if err != nil {
		return nil, fmt.Errorf("grpcguard: %w", err)
	}
	cr.Chain = ch
	return cr, nil
}

// sameGuard reports whether a and b are the same guard: equal values of
// one comparable type (a guard that is not comparable is never the same,
// rather than a panic).
func sameGuard(a, b admission.Guard) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta != nil && ta.Comparable() && a == b
}

// ruleSet selects the rule of a method.
type ruleSet struct {
	exact    map[string]*rule // nil value: exempt
	services map[string]*rule // by "/pkg.Service"; nil value: exempt
	def      *rule
	all      []*rule
	exempt   []string // the exempt patterns, as given
}

// same returns the rule of s named name whose guards and shadow mode are
// r's, or nil. s may be nil.
func (s *ruleSet) same(name string, r Rule) *rule {
	if s == nil {
		return nil
	}
	for _, old := range s.all {
		if old.Name() != name || old.shadow != r.Shadow || len(old.guards) != len(r.Guards) {
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
		name = fmt.Sprintf("rule %q", r.Name())
	}
	switch {
	case pattern == "*":
		if s.def != nil {
			return fmt.Errorf("grpcguard: %s: pattern \"*\" is already taken by rule %q", name, s.def.Name())
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
		by = fmt.Sprintf("rule %q", old.Name())
	}
	return fmt.Errorf("grpcguard: %s: method pattern %q is already taken by %s", name, pattern, by)
}
