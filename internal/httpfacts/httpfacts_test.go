package httpfacts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/levee-go/levee/decide"
)

var _ decide.Lookup = Request{}

func TestRequestLookup(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/pkg.Svc/M", nil)
	r.RemoteAddr = "192.0.2.7:4321"
	r.Header.Set("X-Tenant-Id", "acme")
	r.Header.Add("X-Tenant-Id", "second")
	r.Header.Set("Levee-Criticality", "sheddable")
	l := Of(r)
	ctx := context.Background()
	for _, tt := range []struct {
		name, want string
		ok         bool
	}{
		{"x-tenant-id", "acme", true},
		{"levee-criticality", "sheddable", true},
		{"grpc-previous-rpc-attempts", "", false},
		{"", "", false},
		{strings.Repeat("\xff", 300), "", false},
	} {
		if got, ok := l.Header(ctx, tt.name); got != tt.want || ok != tt.ok {
			t.Errorf("Header(%q) = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	if a := l.Peer(ctx); a == nil || a.String() != "192.0.2.7:4321" || a.Network() != "tcp" {
		t.Errorf("Peer() = %v, want 192.0.2.7:4321 over tcp", a)
	}
	if got := decide.PeerHost(l.Peer(ctx)); got != "192.0.2.7" {
		t.Errorf("PeerHost(Peer()) = %q, want 192.0.2.7", got)
	}
	r.RemoteAddr = ""
	if a := l.Peer(ctx); a != nil {
		t.Errorf("Peer() of a request without RemoteAddr = %v, want nil", a)
	}
	if leaf := l.VerifiedLeaf(ctx); leaf != nil {
		t.Errorf("VerifiedLeaf() without TLS = %v, want nil", leaf)
	}
	cert := &x509.Certificate{DNSNames: []string{"billing.internal"}}
	r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
	if leaf := l.VerifiedLeaf(ctx); leaf != cert {
		t.Errorf("VerifiedLeaf() = %v, want the verified chain's leaf", leaf)
	}
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}} // presented, not verified
	if leaf := l.VerifiedLeaf(ctx); leaf != nil {
		t.Errorf("VerifiedLeaf() of an unverified certificate = %v, want nil", leaf)
	}
}

// Reading a header, the peer and the keys decide computes from them
// allocates nothing once a name has been asked.
func TestLookupAllocatesNothing(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/pkg.Svc/M", nil)
	r.RemoteAddr = "192.0.2.7:4321"
	r.Header.Set("X-Tenant-Id", "acme")
	f := decide.Facts{Ctx: context.Background(), Method: "/pkg.Svc/M", Lookup: Of(r)}
	tenant, peer := decide.HeaderKey("x-tenant-id"), decide.PeerKey()
	var sink string
	allocs := testing.AllocsPerRun(100, func() {
		sink = tenant(f) + "" // no concatenation: the + "" is folded
		sink = peer(f)
		_ = f.PreviousAttempts()
	})
	if allocs != 0 {
		t.Errorf("lookups allocate %v times per call, want 0", allocs)
	}
	_ = sink
}
