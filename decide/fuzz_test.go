package decide

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// FuzzFacts runs a call's facts, as any client may send them, through
// an engine's rules: a method that may be unknown, headers of any length
// and bytes (a -bin header's raw bytes, values that are not UTF-8), a
// peer that may be absent or of any form, a certificate that may be
// absent, a retry-attempt header and a criticality claim of any value.
// Each call gets its rule or the default, a key and a tenant of at most
// MaxKeyLen, one of the four classes (never above its default without
// trust), a previous-attempt count >= 0 and a refusal that names the
// key; nothing panics.
func FuzzFacts(f *testing.F) {
	// More seeds, the edge cases, are in testdata/fuzz/FuzzFacts.
	f.Add("/s.S/M", "x-tenant-id", "acme", []byte("\x00\xff"), "10.0.0.7:443", "1", "critical_plus", true)
	f.Add("unknown", "X-Tenant-Id", "", []byte{}, "", "", "", false)
	f.Fuzz(func(t *testing.T, method, keyHeader, value string, bin []byte, peer, attempts, class string, leaf bool) {
		e, err := New([]Rule{
			{Name: "exact", Methods: []string{"/s.S/M"}, Key: PeerKey(), Tenant: TLSIdentityKey(), Guards: []admission.Guard{admitAll{}},
				Criticality: &Criticality{Default: admission.SheddablePlus, Trusted: TrustPeers(netip.MustParsePrefix("10.0.0.0/8"))}},
			{Name: "svc", Methods: []string{"/s.S/*"}, Key: HeaderKey("x-key-bin"), Tenant: HeaderKey(keyHeader), Guards: []admission.Guard{admitAll{}},
				Criticality: &Criticality{Methods: map[string]admission.Criticality{"/s.S/Low": admission.Sheddable}}},
			{Name: "default", Key: HeaderKey(keyHeader), Tenant: HeaderKey("x-tenant-id"), Guards: []admission.Guard{admitAll{}}, Criticality: &Criticality{}},
		})
		if err != nil {
			t.Fatal(err)
		}
		s := &Snapshot{Headers: map[string]string{
			keyHeader: value, "x-tenant-id": value, "x-key-bin": string(bin),
			PreviousAttemptsHeader: attempts, CriticalityHeader: class,
		}}
		if peer != "" {
			if ap, err := netip.ParseAddrPort(peer); err == nil {
				s.Addr = net.TCPAddrFromAddrPort(ap)
			} else {
				s.Addr = pipeAddr(peer)
			}
		}
		if leaf {
			s.Leaf = &x509.Certificate{Subject: pkix.Name{CommonName: value}, DNSNames: []string{string(bin)}}
		}
		now := time.Unix(1000, 0)
		for _, fa := range []Facts{
			{Ctx: context.Background(), Method: method, Lookup: s},
			{Method: method}, // no headers, peer or identity at all
		} {
			r := e.Match(fa.Method)
			if r == nil {
				t.Fatalf("Match(%q) = nil, want a rule (the default at least)", fa.Method)
			}
			var c admission.Call
			r.Fill(fa, now, &c)
			if len(c.Key) > MaxKeyLen || len(c.Tenant) > MaxKeyLen {
				t.Fatalf("method %q: key of %d bytes, tenant of %d; want at most MaxKeyLen (%d)", method, len(c.Key), len(c.Tenant), MaxKeyLen)
			}
			if c.Class < admission.Sheddable || c.Class > admission.CriticalPlus {
				t.Fatalf("method %q, claim %q: class %d, not one of the four", method, class, c.Class)
			}
			if r.Name() == "default" && c.Class > admission.Critical {
				t.Fatalf("method %q, claim %q: class %v above the default, from a caller nobody trusts", method, class, c.Class)
			}
			if n := fa.PreviousAttempts(); n < 0 {
				t.Fatalf("PreviousAttempts() = %d for %q, want >= 0", n, attempts)
			}
			e.Retrying(fa, now)
			d := admission.RefuseFor(admission.CausePerKeyLimited, admission.EvidenceLimit, "key", time.Second)
			d.PerKey = true
			if rf := r.Refusal(0, d, c.Key); rf.Key != c.Key || rf.Reason != ReasonPerKeyLimited {
				t.Fatalf("refusal %+v, want PER_KEY_LIMITED naming the key %q", rf, c.Key)
			}
		}
	})
}
