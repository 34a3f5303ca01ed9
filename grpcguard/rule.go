package grpcguard

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
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
	key  KeyFunc
	code codes.Code
}

func compileRule(r Rule) (*rule, error) {
	name := r.Name
	if name == "" {
		name = "*"
		if len(r.Methods) > 0 {
			name = r.Methods[0]
		}
	}
	ch, err := admission.NewChain(name, r.Guards, admission.WithShadow(r.Shadow))
	if err != nil {
		return nil, fmt.Errorf("grpcguard: %w", err)
	}
	code := r.Code
	if code == codes.OK {
		code = codes.ResourceExhausted
	}
	return &rule{Chain: ch, key: r.Key, code: code}, nil
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
