package grpcguard

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// whyRefused is the page that leads a caller from a status to its cause.
const whyRefused = "../docs/why-refused.md"

// docTable returns the first column of the rows of the table in the
// section of page whose heading starts with heading, unquoted.
func docTable(t *testing.T, page, heading string) map[string]bool {
	t.Helper()
	_, section, ok := strings.Cut(page, "\n"+heading)
	if !ok {
		t.Fatalf("%s has no section %q", whyRefused, heading)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(section, -1) {
		out[m[1]] = true
	}
	return out
}

// TestWhyRefusedListsReasonsAndEvidence: docs/why-refused.md explains
// every reason a caller can get in levee's ErrorInfo (decide.Reasons and
// ReasonUpstreamOverloaded) and every kind of evidence a refusal names,
// and no other.
func TestWhyRefusedListsReasonsAndEvidence(t *testing.T) {
	b, err := os.ReadFile(whyRefused)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	reasons := map[string]bool{ReasonUpstreamOverloaded: true}
	for _, r := range decide.Reasons {
		reasons[string(r)] = true
	}
	if got := docTable(t, page, "## 2. The reason"); !maps.Equal(got, reasons) {
		t.Errorf("%s explains the reasons %v,\nwant %v", whyRefused, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(reasons)))
	}
	evidence := map[string]bool{}
	for e := range admission.EvidenceKinds {
		evidence[e.String()] = true
	}
	if got := docTable(t, page, "## 3. The evidence"); !maps.Equal(got, evidence) {
		t.Errorf("%s explains the evidence %v,\nwant %v", whyRefused, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(evidence)))
	}
}
