package decide

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"hash/fnv"
	"net"
	"strings"
	"testing"
)

// facts returns the Facts of a call of method with headers h (name,
// value pairs) and peer a.
func facts(method string, a net.Addr, h ...string) Facts {
	s := &Snapshot{Headers: map[string]string{}, Addr: a}
	for i := 0; i+1 < len(h); i += 2 {
		if _, ok := s.Headers[h[i]]; !ok {
			s.Headers[h[i]] = h[i+1]
		}
	}
	return Facts{Ctx: context.Background(), Method: method, Lookup: s}
}

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

func TestPeerKey(t *testing.T) {
	key := PeerKey()
	tests := []struct {
		name string
		give Facts
		want string
	}{
		{"IPv4", facts("", &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5000}), "10.1.2.3"},
		{"IPv6", facts("", &net.TCPAddr{IP: net.ParseIP("::1"), Port: 5000}), "::1"},
		{"host:port of another kind", facts("", pipeAddr("pod-7:9000")), "pod-7"},
		{"address without a port", facts("", pipeAddr("bufconn")), "bufconn"},
		{"nil *net.TCPAddr", facts("", (*net.TCPAddr)(nil)), ""},
		{"no address", facts("", nil), ""},
		{"no lookup", Facts{}, ""},
	}
	for _, tt := range tests {
		if got := key(tt.give); got != tt.want {
			t.Errorf("%s: PeerKey() = %q, want %q", tt.name, got, tt.want)
		}
	}

	// The same connection's peer is found again without formatting.
	f := facts("", &net.TCPAddr{IP: net.IPv4(10, 9, 8, 7), Port: 1})
	key(f)
	if got := testing.AllocsPerRun(100, func() { key(f) }); got != 0 {
		t.Errorf("PeerKey() of a known connection: %v allocations, want 0", got)
	}
}

// TestPeerKeyForgets: a PeerKey that has seen more than MaxPeerKeys
// connections forgets them, so closed ones do not pile up.
func TestPeerKeyForgets(t *testing.T) {
	var c peerKeys
	first := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}
	c.key(first)
	for i := range MaxPeerKeys {
		c.key(&net.TCPAddr{IP: net.IPv4(10, 1, byte(i>>8), byte(i))})
	}
	n := 0
	c.m.Range(func(k, _ any) bool {
		n++
		if k == first {
			t.Error("the first connection is still remembered after MaxPeerKeys more")
		}
		return true
	})
	if n > MaxPeerKeys {
		t.Errorf("remembers %d connections, want at most %d", n, MaxPeerKeys)
	}
	if got := c.key(first); got != "10.0.0.1" {
		t.Errorf("key of a forgotten connection = %q, want it formatted again", got)
	}
}

func TestHeaderKeyCapsLongValues(t *testing.T) {
	long := strings.Repeat("t", 500)
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "short", give: "tenant-a", want: "tenant-a"},
		{name: "exactly MaxKeyLen", give: strings.Repeat("k", MaxKeyLen), want: strings.Repeat("k", MaxKeyLen)},
		// FNV-1a 64 of 500 't's, as hash/fnv computes it.
		{name: "long", give: long, want: long[:MaxKeyLen-17] + "#" + fnvHex(long)},
	}
	kf := HeaderKey("X-Tenant-ID")
	for _, tt := range tests {
		got := kf(facts("", nil, "x-tenant-id", tt.give))
		if got != tt.want {
			t.Errorf("%s: HeaderKey(X-Tenant-ID) = %q, want %q", tt.name, got, tt.want)
		}
		if len(got) > MaxKeyLen {
			t.Errorf("%s: key of %d bytes, want at most %d", tt.name, len(got), MaxKeyLen)
		}
	}
	f := facts("", nil, "x-tenant-id", "tenant-a")
	if a := testing.AllocsPerRun(100, func() { _ = kf(f) }); a != 0 {
		t.Errorf("HeaderKey on a short value: %v allocs per run, want 0", a)
	}
	if got := HeaderKey("x-ſ")(facts("", nil, "x-s", "v")); got != "" {
		t.Errorf("HeaderKey of a non-ASCII name = %q, want \"\"", got)
	}
}

func fnvHex(s string) string {
	h := fnv.New64a()
	h.Write([]byte(s))
	return fmt.Sprintf("%016x", h.Sum64())
}

func TestTLSIdentityKey(t *testing.T) {
	key := TLSIdentityKey()
	tests := []struct {
		name string
		give *x509.Certificate
		want string
	}{
		{"no certificate", nil, ""},
		{"DNS name first", &x509.Certificate{DNSNames: []string{"billing.internal", "b"}, Subject: pkix.Name{CommonName: "cn"}}, "billing.internal"},
		{"common name", &x509.Certificate{Subject: pkix.Name{CommonName: "cn"}}, "cn"},
		{"long name capped", &x509.Certificate{DNSNames: []string{strings.Repeat("a", 300)}}, capKey(strings.Repeat("a", 300))},
	}
	for _, tt := range tests {
		f := Facts{Lookup: &Snapshot{Leaf: tt.give}}
		if got := key(f); got != tt.want {
			t.Errorf("%s: TLSIdentityKey() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// FuzzPeerKey checks PeerKey on any TCP address and any other address: it
// never panics, a TCP peer's key is its IP without the port, the same
// connection always gets the same key, and a key is never longer than
// MaxKeyLen.
func FuzzPeerKey(f *testing.F) {
	// More seeds, the edge cases, are in testdata/fuzz/FuzzPeerKey.
	f.Add([]byte{127, 0, 0, 1}, 50051, "10.0.0.1:443")
	f.Add([]byte(net.ParseIP("::ffff:192.0.2.7")), 0, "bufconn")
	f.Fuzz(func(t *testing.T, ip []byte, port int, other string) {
		kf := PeerKey()
		a := &net.TCPAddr{IP: net.IP(ip), Port: port}
		fa := facts("", a)
		k := kf(fa)
		if len(ip) == net.IPv4len || len(ip) == net.IPv6len { // what a TCP connection has
			if want := net.IP(ip).String(); k != want {
				t.Fatalf("PeerKey() for %v = %q, want %q", a, k, want)
			}
		}
		if again := kf(fa); again != k {
			t.Fatalf("PeerKey() for %v = %q, then %q", a, k, again)
		}
		ok := kf(facts("", pipeAddr(other)))
		for _, key := range []string{k, ok} {
			if len(key) > MaxKeyLen {
				t.Fatalf("PeerKey() = %d bytes, want at most MaxKeyLen (%d)", len(key), MaxKeyLen)
			}
		}
		if host, _, err := net.SplitHostPort(other); err == nil && len(host) <= MaxKeyLen && ok != host {
			t.Fatalf("PeerKey() for address %q = %q, want its host %q", other, ok, host)
		}
		if kf(facts("", nil)) != "" {
			t.Fatal("PeerKey() without a peer is not \"\"")
		}
	})
}
