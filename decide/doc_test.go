package decide

import (
	"go/parser"
	"go/token"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/levee-go/levee/admission"
)

// evidenceNames returns the name of every kind of evidence.
func evidenceNames() []string {
	var out []string
	for e := range admission.EvidenceKinds {
		out = append(out, e.String())
	}
	return out
}

// TestPackageDocListsReasons: the package doc's "Refusal reasons" lists
// every reason of Reasons and every kind of evidence, and nothing else,
// in its indented tables.
func TestPackageDocListsReasons(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(f.Doc.Text(), "# Refusal reasons\n")
	if !ok {
		t.Fatal(`package doc has no "# Refusal reasons" section`)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if word, _, _ := strings.Cut(strings.TrimPrefix(line, "\t"), " "); strings.HasPrefix(line, "\t") && word != "" {
			listed[word] = true
		}
	}
	want := map[string]bool{}
	for _, r := range Reasons {
		want[string(r)] = true
	}
	for _, e := range evidenceNames() {
		want[e] = true
	}
	if !maps.Equal(listed, want) {
		t.Errorf("package doc lists %v,\nwant the reasons and evidence kinds %v", slices.Sorted(maps.Keys(listed)), slices.Sorted(maps.Keys(want)))
	}
}
