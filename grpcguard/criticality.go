package grpcguard

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/netip"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/levee-go/levee/admission"
)

// CriticalityHeader is the metadata key that carries a call's criticality
// class: "critical_plus", "critical", "sheddable_plus" or "sheddable"
// (admission.Criticality). A Rule with a Criticality reads it; the
// client interceptor propagates it (see Client).
const CriticalityHeader = "levee-criticality"

// Criticality says how a rule reads each call's criticality class
// (admission.Call.Class) from the CriticalityHeader.
//
// Metadata is written by the caller, so any client could claim
// critical_plus to jump ahead. The trust model: a claim at or below the
// method's default class is always honoured (a caller may always lower
// its own calls); a claim above it is honoured only when Trusted says the
// caller is trusted, and is otherwise lowered to the default. A missing
// or unknown value gets the default too.
//
// The zero value makes every call Critical and trusts nobody above it.
type Criticality struct {
	// Default is the default class of the rule's methods; zero: Critical.
	Default admission.Criticality
	// Methods overrides Default for some methods: a full method name
	// ("/pkg.Service/Method") or a service's ("/pkg.Service/*"); a method's
	// own entry wins over its service's.
	Methods map[string]admission.Criticality
	// Trusted reports whether the caller of a call may claim a class
	// above its method's default. It gets the call's context, which
	// carries its peer (peer.FromContext), and runs for claims above the
	// default only. nil: no caller is trusted; see TrustPeers and
	// TrustTLSNames.
	Trusted func(ctx context.Context) bool

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
	return fmt.Errorf("grpcguard: rule %q: Criticality: %s", rule, strings.Join(errs, "; "))
}

// class returns the class of a call of method: md is its incoming
// metadata when at hand (in the tap), else nil and ctx's is read. It does
// not allocate.
func (c *Criticality) class(ctx context.Context, md metadata.MD, method string) admission.Criticality {
	def := c.Default
	if k, ok := c.Methods[method]; ok {
		def = k
	} else if i := strings.LastIndexByte(method, '/'); i > 0 {
		if k, ok := c.services[method[:i]]; ok {
			def = k
		}
	}
	var v []string
	if md != nil {
		v = md[CriticalityHeader]
	} else {
		v = metadata.ValueFromIncomingContext(ctx, CriticalityHeader)
	}
	if len(v) == 0 {
		return def
	}
	claim, ok := admission.ParseCriticality(v[0])
	if !ok || claim <= def {
		if !ok {
			return def
		}
		return claim
	}
	if c.Trusted != nil && c.Trusted(ctx) {
		return claim
	}
	return def
}

// TrustPeers returns a Criticality.Trusted that trusts callers whose
// address is in one of prefixes (an internal network, say).
func TrustPeers(prefixes ...netip.Prefix) func(ctx context.Context) bool {
	ps := append([]netip.Prefix(nil), prefixes...)
	return func(ctx context.Context) bool {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return false
		}
		ap, err := netip.ParseAddrPort(p.Addr.String())
		if err != nil {
			return false
		}
		a := ap.Addr().Unmap()
		for _, pr := range ps {
			if pr.Contains(a) {
				return true
			}
		}
		return false
	}
}

// TrustTLSNames returns a Criticality.Trusted that trusts callers that
// authenticated with a client certificate verified by the server's TLS
// configuration whose DNS or URI subject alternative names include one of
// names (mTLS; a SPIFFE ID is a URI name).
func TrustTLSNames(names ...string) func(ctx context.Context) bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return func(ctx context.Context) bool {
		leaf := verifiedLeaf(ctx)
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

// verifiedLeaf is the verified client certificate of ctx's peer, or nil.
func verifiedLeaf(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return info.State.VerifiedChains[0][0]
}

// TLSIdentityKey keys calls by their caller's authenticated identity: the
// first DNS name of the client certificate the server's TLS configuration
// verified, else its subject's common name, else "" (no identity). Use it
// as a Rule's Tenant so that a tenant is who the caller proved to be,
// rather than what a header claims.
func TLSIdentityKey() KeyFunc {
	return func(ctx context.Context, _ metadata.MD) string {
		leaf := verifiedLeaf(ctx)
		if leaf == nil {
			return ""
		}
		if len(leaf.DNSNames) > 0 {
			return leaf.DNSNames[0]
		}
		return leaf.Subject.CommonName
	}
}

// WithOutgoingCriticality returns ctx with class as the criticality of the
// calls made with it, overriding the class levee's client interceptor
// would otherwise propagate from the call being served.
func WithOutgoingCriticality(ctx context.Context, class admission.Criticality) context.Context {
	return metadata.AppendToOutgoingContext(ctx, CriticalityHeader, class.String())
}

// propagateCriticality returns ctx with the criticality of the call ctx
// serves, if any, as that of the calls made with it, unless the code set
// one (WithOutgoingCriticality). The class propagated is the one the
// serving rule gave the call (a claim it did not trust is lowered); for a
// call no rule with a Criticality admitted, only a claim at or below
// Critical is passed on, since lowering one's own class is always safe.
// It allocates only when it adds the class.
func propagateCriticality(ctx context.Context) context.Context {
	if v := metadata.ValueFromOutgoingContext(ctx, CriticalityHeader); len(v) > 0 {
		return ctx
	}
	if st, ok := ctx.Value(stateKey{}).(*callState); ok && st.rule.crit != nil {
		return metadata.AppendToOutgoingContext(ctx, CriticalityHeader, st.call.Class.String())
	}
	v := metadata.ValueFromIncomingContext(ctx, CriticalityHeader)
	if len(v) == 0 {
		return ctx
	}
	if k, ok := admission.ParseCriticality(v[0]); ok && k <= admission.Critical {
		return metadata.AppendToOutgoingContext(ctx, CriticalityHeader, k.String())
	}
	return ctx
}
