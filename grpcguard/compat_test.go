package grpcguard

import (
	"context"
	"crypto/x509"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"testing"

	"github.com/levee-go/levee/decide"
)

// The deprecated forwarders answer what decide's functions answer, for a
// call with every fact and for one with none.
func TestCompatForwarders(t *testing.T) {
	spiffe, err := url.Parse("spiffe://example.org/ns/prod/sa/orders")
	if err != nil {
		t.Fatal(err)
	}
	full := decide.Facts{Ctx: context.Background(), Method: "/pkg.S/M", Lookup: &decide.Snapshot{
		Headers: map[string]string{"x-tenant-id": "acme"},
		Addr:    &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5000},
		Leaf:    &x509.Certificate{DNSNames: []string{"orders.internal"}, URIs: []*url.URL{spiffe}},
	}}
	none := decide.Facts{Ctx: context.Background(), Method: "/pkg.S/M"}
	str := func(f func(decide.Facts) bool) func(decide.Facts) string {
		return func(x decide.Facts) string { return strconv.FormatBool(f(x)) }
	}
	internal := netip.MustParsePrefix("10.0.0.0/8")
	tests := []struct {
		name               string
		compat, decide     func(decide.Facts) string
		wantFull, wantNone string
	}{
		{"HeaderKey", HeaderKey("X-Tenant-Id"), decide.HeaderKey("X-Tenant-Id"), "acme", ""},
		{"PeerKey", PeerKey(), decide.PeerKey(), "10.1.2.3", ""},
		{"TLSIdentityKey", TLSIdentityKey(), decide.TLSIdentityKey(), "orders.internal", ""},
		{"TrustPeers", str(TrustPeers(internal)), str(decide.TrustPeers(internal)), "true", "false"},
		{"TrustTLSNames", str(TrustTLSNames(spiffe.String())), str(decide.TrustTLSNames(spiffe.String())), "true", "false"},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			facts decide.Facts
			want  string
		}{{full, tt.wantFull}, {none, tt.wantNone}} {
			got, want := tt.compat(c.facts), tt.decide(c.facts)
			if got != want || got != c.want {
				t.Errorf("%s on %v: %q, decide's %q; want %q from both", tt.name, c.facts.Lookup, got, want, c.want)
			}
		}
	}
}
