package decide

import (
	"strings"
	"testing"

	"github.com/levee-go/levee/admission"
)

func TestNewRejectsBadRules(t *testing.T) {
	var lim admission.Guard = admitAll{}
	many := make([]admission.Guard, 9)
	for i := range many {
		many[i] = lim
	}
	tests := []struct {
		name  string
		rules []Rule
		want  string
	}{
		{"no guards", []Rule{{Name: "r"}}, `decide: admission: chain "r" has no guards`},
		{"too many guards", []Rule{{Name: "r", Guards: many}}, `chain "r" has 9 guards, at most 8 allowed`},
		{"nil guard", []Rule{{Name: "r", Guards: []admission.Guard{nil}}}, `chain "r": guard 0 is nil`},
		{"bad pattern", []Rule{{Methods: []string{"pkg.Svc/M"}, Guards: []admission.Guard{lim}}}, `method pattern "pkg.Svc/M" is not`},
		{"inner wildcard", []Rule{{Methods: []string{"/pkg.Svc/Get*"}, Guards: []admission.Guard{lim}}}, `'*' is allowed only as the whole method`},
		{"duplicate", []Rule{{Name: "a", Methods: []string{"/grpc.testing.TestService/EmptyCall"}, Guards: []admission.Guard{lim}}, {Name: "b", Methods: []string{"/grpc.testing.TestService/EmptyCall"}, Guards: []admission.Guard{lim}}},
			`rule "b": method pattern "/grpc.testing.TestService/EmptyCall" is already taken by rule "a"`},
		{"two defaults", []Rule{{Name: "a", Guards: []admission.Guard{lim}}, {Name: "b", Guards: []admission.Guard{lim}}}, `pattern "*" is already taken by rule "a"`},
		{"bad code", []Rule{{Name: "r", Guards: []admission.Guard{lim}, Code: 3}}, `rule "r": Code: want ResourceExhausted (8) or Unavailable (14), got INVALID_ARGUMENT`},
		{"exempt", []Rule{{Name: "h", Methods: []string{"/grpc.health.v1.Health/*"}, Guards: []admission.Guard{lim}}}, `already taken by an exemption`},
	}
	for _, tt := range tests {
		if _, err := New(tt.rules); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New() = %v, want error containing %q", tt.name, err, tt.want)
		}
	}
}

func TestRuleSelection(t *testing.T) {
	g := func(string) admission.Guard { return admitAll{} }
	e, err := New([]Rule{
		{Name: "exact", Methods: []string{"/grpc.testing.TestService/EmptyCall"}, Guards: []admission.Guard{g("e")}},
		{Name: "service", Methods: []string{"/grpc.testing.TestService/*"}, Guards: []admission.Guard{g("s")}},
		{Name: "default", Guards: []admission.Guard{g("d")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ method, want string }{
		{"/grpc.testing.TestService/EmptyCall", "exact"},
		{"/grpc.testing.TestService/UnaryCall", "service"},
		{"/other.Svc/M", "default"},
		{"/grpc.health.v1.Health/Check", ""},
	}
	for _, tt := range tests {
		r := e.Match(tt.method)
		got := ""
		if r != nil {
			got = r.Name()
		}
		if got != tt.want {
			t.Errorf("rule for %s = %q, want %q", tt.method, got, tt.want)
		}
	}
}

func TestCodes(t *testing.T) {
	tests := []struct {
		give       Code
		name       string
		httpStatus int
	}{
		{OK, "OK", 200},
		{DeadlineExceeded, "DEADLINE_EXCEEDED", 504},
		{ResourceExhausted, "RESOURCE_EXHAUSTED", 429},
		{Unavailable, "UNAVAILABLE", 503},
		{5, "NOT_FOUND", 500},
		{16, "UNAUTHENTICATED", 500},
		{17, "CODE(17)", 500},
	}
	for _, tt := range tests {
		if got := tt.give.String(); got != tt.name {
			t.Errorf("Code(%d).String() = %q, want %q", uint32(tt.give), got, tt.name)
		}
		if got := tt.give.HTTPStatus(); got != tt.httpStatus {
			t.Errorf("Code(%d).HTTPStatus() = %d, want %d", uint32(tt.give), got, tt.httpStatus)
		}
	}
}

// An exemption of every method ("*") takes the default pattern: a rule
// that also claims "*" must be refused, as for any pattern an exemption
// takes (New's doc), not silently guard the methods the exemption was
// meant to leave alone.
func TestExemptAllConflictsWithDefaultRule(t *testing.T) {
	rules := []Rule{{Name: "all", Guards: []admission.Guard{admitAll{}}}}
	e, err := New(rules, WithExempt("*"))
	if err == nil {
		r := e.Match("/pkg.Svc/M")
		name := "<nil>"
		if r != nil {
			name = r.Name()
		}
		t.Fatalf(`New(default rule, WithExempt("*")) = nil error; /pkg.Svc/M governed by %s, want an error: "*" is already taken by an exemption`, name)
	}
	if want := `rule "all": method pattern "*" is already taken by an exemption`; !strings.Contains(err.Error(), want) {
		t.Errorf(`New(default rule, WithExempt("*")) = %v, want an error containing %q`, err, want)
	}
	// Without a default rule, "*" exempts every method.
	e, err = New([]Rule{{Name: "svc", Methods: []string{"/pkg.Svc/*"}, Guards: []admission.Guard{admitAll{}}}}, WithExempt("*"))
	if err != nil {
		t.Fatal(err)
	}
	if r := e.Match("/other.Svc/M"); r != nil {
		t.Errorf(`WithExempt("*"): /other.Svc/M governed by %q, want none`, r.Name())
	}
}
