// Package httpfacts reads the facts of a call (decide.Lookup) from a
// net/http request, for the front-ends that serve over net/http
// (connectguard, httpguard): its headers, its peer's address and its
// verified client certificate, without copying and without allocating.
package httpfacts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"maps"
	"net"
	"net/http"
	"net/textproto"
	"sync"
	"sync/atomic"
)

// Request is the decide.Lookup of an *http.Request (Of). It reads the
// request's headers (canonical keys, as net/http stores them for HTTP/1.x
// and HTTP/2 alike), its RemoteAddr and the first certificate of its
// first verified TLS chain. The request must not change while a call
// reads it. A Request is one pointer: stored in an interface, it does not
// allocate.
type Request struct{ r *http.Request }

// Of returns r's Lookup.
func Of(r *http.Request) Request { return Request{r} }

// Header returns the first value of the request's header name (lower
// case, as decide asks).
func (r Request) Header(_ context.Context, name string) (string, bool) {
	return Header(r.r.Header, name)
}

// Peer returns the request's RemoteAddr as a net.Addr, or nil when it is
// empty. Its String is RemoteAddr as it is ("ip:port" for a TCP
// connection); it points into the request rather than copying it.
func (r Request) Peer(context.Context) net.Addr {
	if r.r.RemoteAddr == "" {
		return nil
	}
	return Addr{&r.r.RemoteAddr}
}

// VerifiedLeaf returns the client certificate the server's TLS
// configuration verified, or nil.
func (r Request) VerifiedLeaf(context.Context) *x509.Certificate {
	return VerifiedLeaf(r.r.TLS)
}

// VerifiedLeaf returns the first certificate of the first verified chain
// of cs, or nil when cs is nil or has none.
func VerifiedLeaf(cs *tls.ConnectionState) *x509.Certificate {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return cs.VerifiedChains[0][0]
}

// Addr is a client's address as net/http gives it (Request.RemoteAddr,
// connect.Peer.Addr): a net.Addr whose String is the address as it is.
// It is one pointer to the string: stored in an interface, it does not
// allocate.
type Addr struct{ s *string }

// NewAddr returns the Addr of s.
func NewAddr(s *string) Addr { return Addr{s} }

// Network returns "tcp".
func (Addr) Network() string { return "tcp" }

// String returns the address.
func (a Addr) String() string { return *a.s }

// Header returns the first value of h's header name, given in lower case
// as decide asks for it, and whether h has one. It finds the canonical
// key net/http stores ("x-tenant-id" → "X-Tenant-Id") in a small cache,
// so that it allocates nothing once a name has been asked; names beyond
// the cache's size are canonicalised per call.
func Header(h http.Header, name string) (string, bool) {
	if len(h) == 0 {
		return "", false
	}
	v := h[canonical(name)]
	if len(v) == 0 {
		return "", false
	}
	return v[0], true
}

// maxNames bounds the canonical names remembered. The names asked come
// from rules and key functions, not from clients, so a handful is usual.
const maxNames = 256

// names maps the lower-case names asked to their canonical keys. Reads
// take no lock and allocate nothing; a new name copies the map.
var (
	names   atomic.Pointer[map[string]string]
	namesMu sync.Mutex // serialises the copies
)

func canonical(name string) string {
	if m := names.Load(); m != nil {
		if k, ok := (*m)[name]; ok {
			return k
		}
	}
	k := textproto.CanonicalMIMEHeaderKey(name)
	namesMu.Lock()
	defer namesMu.Unlock()
	m := map[string]string{}
	if old := names.Load(); old != nil {
		if len(*old) >= maxNames {
			return k
		}
		m = maps.Clone(*old)
	}
	m[name] = k
	names.Store(&m)
	return k
}
