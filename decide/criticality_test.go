package decide

import (
	"crypto/x509"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/levee-go/levee/admission"
)

// admitAll is a guard that admits every call.
type admitAll struct{}

func (admitAll) Name() string                                               { return "all" }
func (admitAll) Admit(admission.Call) admission.Decision                    { return admission.Decision{} }
func (admitAll) Finish(admission.Call, admission.Permit, admission.Outcome) {}

func TestCriticalityServicePatterns(t *testing.T) {
	r, err := compileRule(Rule{Guards: []admission.Guard{admitAll{}}, Criticality: &Criticality{
		Default: admission.SheddablePlus,
		Methods: map[string]admission.Criticality{"/a.S/*": admission.Sheddable, "/a.S/M": admission.CriticalPlus},
	}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for method, want := range map[string]admission.Criticality{
		"/a.S/X": admission.Sheddable, "/a.S/M": admission.CriticalPlus, "/b.S/X": admission.SheddablePlus,
	} {
		if got := r.crit.class(facts(method, nil)); got != want {
			t.Errorf("class of %s = %v, want %v", method, got, want)
		}
	}
}

// TestCriticalityTrust: a claim above the method's default is honoured
// only for a trusted caller; a claim below it always; a bad claim gets
// the default.
func TestCriticalityTrust(t *testing.T) {
	internal := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 1}
	outside := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}
	mapped := &net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.8"), Port: 1}
	c := (&Criticality{Default: admission.SheddablePlus, Trusted: TrustPeers(netip.MustParsePrefix("10.0.0.0/8"))}).compile()
	tests := []struct {
		name  string
		peer  net.Addr
		claim string
		want  admission.Criticality
	}{
		{"no claim", internal, "", admission.SheddablePlus},
		{"lower, untrusted", outside, "sheddable", admission.Sheddable},
		{"higher, untrusted", outside, "critical_plus", admission.SheddablePlus},
		{"higher, trusted", internal, "critical_plus", admission.CriticalPlus},
		{"higher, trusted, IPv4-mapped", mapped, "CRITICAL", admission.Critical},
		{"higher, no peer", nil, "critical", admission.SheddablePlus},
		{"higher, peer of another kind", pipeAddr("10.0.0.1:80"), "critical", admission.Critical},
		{"higher, peer without a port", pipeAddr("bufconn"), "critical", admission.SheddablePlus},
		{"unknown class", internal, "urgent", admission.SheddablePlus},
		{"binary claim", internal, "\xff\x00critical", admission.SheddablePlus},
	}
	for _, tt := range tests {
		h := []string{}
		if tt.claim != "" {
			h = []string{CriticalityHeader, tt.claim}
		}
		if got := c.class(facts("/a.S/M", tt.peer, h...)); got != tt.want {
			t.Errorf("%s: class = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestTrustTLSNames(t *testing.T) {
	spiffe, _ := url.Parse("spiffe://corp/billing")
	trusted := TrustTLSNames("gateway.internal", "spiffe://corp/billing")
	tests := []struct {
		name string
		leaf *x509.Certificate
		want bool
	}{
		{"no certificate", nil, false},
		{"DNS name", &x509.Certificate{DNSNames: []string{"x", "gateway.internal"}}, true},
		{"SPIFFE ID", &x509.Certificate{URIs: []*url.URL{spiffe}}, true},
		{"other names", &x509.Certificate{DNSNames: []string{"evil.example"}}, false},
	}
	for _, tt := range tests {
		if got := trusted(Facts{Lookup: &Snapshot{Leaf: tt.leaf}}); got != tt.want {
			t.Errorf("%s: TrustTLSNames = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestCriticalityValidated(t *testing.T) {
	_, err := New([]Rule{{Name: "r", Guards: []admission.Guard{admitAll{}}, Criticality: &Criticality{
		Default: 7,
		Methods: map[string]admission.Criticality{"Bad": admission.Critical, "/a.S/M": -9},
	}}})
	if err == nil {
		t.Fatal("New accepted a bad Criticality")
	}
	for _, want := range []string{`rule "r"`, "Default: class 7", `"Bad" is not a method`, `Methods["/a.S/M"]: class -9`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
