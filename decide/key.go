package decide

import (
	"hash/fnv"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// KeyFunc extracts a key from a call's facts: the key of per-key guards
// (Rule.Key) or the call's tenant (Rule.Tenant). It runs on every call
// of its rule, so it should not allocate for a call whose key it has
// seen; it must be safe for concurrent use. "" is the key of calls that
// have none.
type KeyFunc func(f Facts) string

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

// HeaderKey keys calls by the first value of a header, such as
// "x-tenant-id" (case-insensitive), shortened to MaxKeyLen bytes. Calls
// without it share the key "". A name that is not ASCII once lowercased
// names no header HTTP/2 can carry: every call has the key "". The value
// is taken as it is, binary or not UTF-8 (a front-end that renders the
// key, as in a QuotaFailure, makes it valid there).
func HeaderKey(name string) KeyFunc {
	name = strings.ToLower(name)
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			// A front-end's case-insensitive lookup could match such a
			// name to an ASCII header by Unicode case folding ("ſ" to
			// "s") where another's exact lookup does not.
			return func(Facts) string { return "" }
		}
	}
	return func(f Facts) string {
		v, _ := f.Header(name)
		return capKey(v)
	}
}

// PeerKey keys calls by the client's IP address (without the port), or by
// the host of an address of another kind, shortened to MaxKeyLen bytes;
// "" when the peer is unknown.
//
// A front-end gives every call of a TCP connection the same address
// value (grpc-go does), so the returned KeyFunc formats each connection's
// address once and then finds it without allocating. It remembers at
// most MaxPeerKeys connections (a small address each, not the
// connection) and forgets them all when it has seen more, which also
// drops those that have closed. Addresses of other kinds are formatted
// per call. Each call of PeerKey returns a KeyFunc with its own memory.
func PeerKey() KeyFunc {
	c := new(peerKeys)
	return func(f Facts) string {
		a := f.Peer()
		if a == nil {
			return ""
		}
		if t, ok := a.(*net.TCPAddr); ok {
			if t == nil {
				return ""
			}
			return c.key(t)
		}
		return PeerHost(a)
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

// PeerHost returns the host of a client's address, shortened to
// MaxKeyLen bytes: the IP address of a *net.TCPAddr (without the port),
// the host of an address of another kind whose String is "host:port",
// or that String whole; "" for nil. It allocates; PeerKey remembers what
// it formatted.
func PeerHost(a net.Addr) string {
	switch t := a.(type) {
	case nil:
		return ""
	case *net.TCPAddr:
		if t == nil {
			return ""
		}
		return capKey(t.IP.String())
	}
	s := a.String()
	if host, _, err := net.SplitHostPort(s); err == nil {
		return capKey(host)
	}
	return capKey(s)
}

// TLSIdentityKey keys calls by their caller's authenticated identity: the
// first DNS name of the client certificate the server's TLS configuration
// verified (Facts.VerifiedLeaf), else its subject's common name, else ""
// (no identity). Use it as a Rule's Tenant so that a tenant is who the
// caller proved to be, rather than what a header claims.
func TLSIdentityKey() KeyFunc {
	return func(f Facts) string {
		leaf := f.VerifiedLeaf()
		if leaf == nil {
			return ""
		}
		if len(leaf.DNSNames) > 0 {
			return capKey(leaf.DNSNames[0])
		}
		return capKey(leaf.Subject.CommonName)
	}
}
