package decide

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/levee-go/levee/admission"
)

// CriticalityHeader is the header that carries a call's criticality
// class: "critical_plus", "critical", "sheddable_plus" or "sheddable"
// (admission.Criticality). A Rule with a Criticality reads it; levee's
// gRPC client interceptor propagates it.
const CriticalityHeader = "levee-criticality"

// Criticality says how a rule reads each call's criticality class
// (admission.Call.Class) from the CriticalityHeader.
//
// Headers are written by the caller, so any client could claim
// critical_plus to jump ahead. The trust model: a claim at or below the
// method's default class is always honoured (a caller may always lower
// its own calls); a claim above it is honoured only when Trusted says the
// caller is trusted, and is otherwise lowered to the default. A missing
// or unknown value gets the default too.
//
// The zero value makes every call Critical and trusts nobody above it.
// A Rule copies it when it is compiled; do not change one a rule uses.
// Trusted runs on the goroutines of the calls, several at once: it must
// be safe for concurrent use.
type Criticality struct {
	// Default is the default class of the rule's methods; zero: Critical.
	Default admission.Criticality
	// Methods overrides Default for some methods: a full method name
	// ("/pkg.Service/Method") or a service's ("/pkg.Service/*"); a method's
	// own entry wins over its service's.
	Methods map[string]admission.Criticality
	// Trusted reports whether the caller of a call may claim a class
	// above its method's default, from the call's facts (its peer, its
	// verified certificate; Facts.Ctx for what else a front-end put in
	// the context). It runs for claims above the default only. nil: no
	// caller is trusted; see TrustPeers and TrustTLSNames.
	Trusted func(f Facts) bool

	services map[string]admission.Criticality // "/pkg.Service" → class, compiled from Methods
}

func (c *Criticality) validate(rule string) error {
	var errs []string
	valid := func(k admission.Criticality) bool { return k >= admission.Sheddable && k <= admission.CriticalPlus }
	if !valid(c.Default) {
		errs = append(errs, fmt.Sprintf("Default: class %d is not one of the four classes", c.Default))
	}
	for m, k := range c.Methods {
		if !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 || strings.HasSuffix(m, "/") || strings.Contains(strings.TrimSuffix(m, "/*"), "*") {
			errs = append(errs, fmt.Sprintf("Methods: %q is not a method \"/pkg.Service/Method\" or a service \"/pkg.Service/*\"", m))
		}
		if !valid(k) {
			errs = append(errs, fmt.Sprintf("Methods[%q]: class %d is not one of the four classes", m, k))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("decide: rule %q: Criticality: %s", rule, strings.Join(errs, "; "))
}

// compile returns a copy of c with its service entries split out.
func (c *Criticality) compile() *Criticality {
	cp := *c
	cp.Methods = make(map[string]admission.Criticality, len(c.Methods))
	cp.services = map[string]admission.Criticality{}
	for k, v := range c.Methods {
		if svc, ok := strings.CutSuffix(k, "/*"); ok {
			cp.services[svc] = v
		} else {
			cp.Methods[k] = v
		}
	}
	return &cp
}

// defaultOf returns the default class of method under c: its own entry in
// Methods, else its service's, else Default.
func (c *Criticality) defaultOf(method string) admission.Criticality {
	if k, ok := lookupMethod(c.Methods, c.services, method); ok {
		return k
	}
	return c.Default
}

// class returns the class of the call f describes. It does not allocate
// when the Lookup and Trusted do not.
func (c *Criticality) class(f Facts) admission.Criticality {
	def := c.defaultOf(f.Method)
	v, ok := f.Header(CriticalityHeader)
	if !ok {
		return def
	}
	claim, ok := admission.ParseCriticality(v)
	switch {
	case !ok:
		return def
	case claim <= def:
		return claim
	case c.Trusted != nil && c.Trusted(f):
		return claim
	}
	return def
}

// TrustPeers returns a Criticality.Trusted that trusts callers whose
// address is in one of prefixes (an internal network, say). A caller
// whose address is unknown, or not an IP address, is not trusted.
func TrustPeers(prefixes ...netip.Prefix) func(f Facts) bool {
	ps := append([]netip.Prefix(nil), prefixes...)
	return func(f Facts) bool {
		a, ok := peerAddr(f.Peer())
		if !ok {
			return false
		}
		for _, pr := range ps {
			if pr.Contains(a) {
				return true
			}
		}
		return false
	}
}

// peerAddr is the IP address of a (IPv4-mapped addresses unmapped).
func peerAddr(a net.Addr) (netip.Addr, bool) {
	switch t := a.(type) {
	case nil:
		return netip.Addr{}, false
	case *net.TCPAddr:
		if t == nil {
			return netip.Addr{}, false
		}
		ip, ok := netip.AddrFromSlice(t.IP)
		return ip.Unmap(), ok
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// TrustTLSNames returns a Criticality.Trusted that trusts callers that
// authenticated with a client certificate verified by the server's TLS
// configuration (Facts.VerifiedLeaf) whose DNS or URI subject
// alternative names include one of names (mTLS; a SPIFFE ID is a URI
// name).
func TrustTLSNames(names ...string) func(f Facts) bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return func(f Facts) bool {
		leaf := f.VerifiedLeaf()
		if leaf == nil {
			return false
		}
		for _, n := range leaf.DNSNames {
			if set[n] {
				return true
			}
		}
		for _, u := range leaf.URIs {
			if set[u.String()] {
				return true
			}
		}
		return false
	}
}
