package grpcguard

import (
	"net/netip"

	"github.com/levee-go/levee/decide"
)

// The names below moved to package decide, the engine every transport
// shares. They stay here, as aliases, for one release.

// Rule is decide.Rule, the same type: its zero value and what is safe
// for concurrent use are documented there.
//
// Deprecated: use decide.Rule. Its Code is a decide.Code
// (decide.Unavailable, or decide.Code(codes.Unavailable)).
type Rule = decide.Rule

// KeyFunc is decide.KeyFunc, which reads a call's decide.Facts. The
// zero (nil) KeyFunc in a Rule reads no key; one that is set runs on
// many calls at once and must be safe for concurrent use.
//
// Deprecated: use decide.KeyFunc; MetadataKey adapts a function of the
// old form, func(context.Context, metadata.MD) string.
type KeyFunc = decide.KeyFunc

// Criticality is decide.Criticality, the same type, whose doc gives its
// zero value and concurrency. Its Trusted reads the call's decide.Facts
// (Facts.Ctx is the context the old form got).
//
// Deprecated: use decide.Criticality.
type Criticality = decide.Criticality

// Deprecated: use decide.CriticalityHeader.
const CriticalityHeader = decide.CriticalityHeader

// Deprecated: use decide.MaxKeyLen.
const MaxKeyLen = decide.MaxKeyLen

// Deprecated: use decide.MaxPeerKeys.
const MaxPeerKeys = decide.MaxPeerKeys

// Deprecated: use decide.SustainedAfter.
const SustainedAfter = decide.SustainedAfter

// Deprecated: use decide.SustainedGap.
const SustainedGap = decide.SustainedGap

// Deprecated: use decide.PreviousAttemptsHeader.
const PreviousAttemptsHeader = decide.PreviousAttemptsHeader

// HeaderKey is decide.HeaderKey.
//
// Deprecated: use decide.HeaderKey.
func HeaderKey(name string) decide.KeyFunc { return decide.HeaderKey(name) }

// PeerKey is decide.PeerKey.
//
// Deprecated: use decide.PeerKey.
func PeerKey() decide.KeyFunc { return decide.PeerKey() }

// TLSIdentityKey is decide.TLSIdentityKey.
//
// Deprecated: use decide.TLSIdentityKey.
func TLSIdentityKey() decide.KeyFunc { return decide.TLSIdentityKey() }

// TrustPeers is decide.TrustPeers.
//
// Deprecated: use decide.TrustPeers.
func TrustPeers(prefixes ...netip.Prefix) func(decide.Facts) bool {
	return decide.TrustPeers(prefixes...)
}

// TrustTLSNames is decide.TrustTLSNames.
//
// Deprecated: use decide.TrustTLSNames.
func TrustTLSNames(names ...string) func(decide.Facts) bool {
	return decide.TrustTLSNames(names...)
}

// DefaultExempt is decide.DefaultExempt (the same slice).
//
// Deprecated: use decide.DefaultExempt.
var DefaultExempt = decide.DefaultExempt
