package statuspage

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/levee-go/levee/decide"
)

// TestCutAtRuneBoundary: a method or tenant longer than MaxNameLen is
// cut between two characters, never inside one. Before, it was cut at
// MaxNameLen-3 bytes whatever was there, and a name of multi-byte
// characters (a tenant in Chinese, an emoji) ended with half a
// character before the "...", invalid UTF-8 that the JSON form turned
// into U+FFFD and the text form into a \x escape.
func TestCutAtRuneBoundary(t *testing.T) {
	p := New(Sources{})
	for _, r := range []string{"é", "租", "😀"} {
		for pad := range utf8.UTFMax {
			name := strings.Repeat("m", pad) + strings.Repeat(r, MaxNameLen)
			p.Record(decide.RefusalEvent{Time: t0, Method: name, Tenant: name, Refusal: decide.Refusal{Guard: "rate"}})
			got := p.Status().Refusals[0]
			for _, s := range []string{got.Method, got.Tenant} {
				kept, ok := strings.CutSuffix(s, "...")
				if !utf8.ValidString(s) || !ok || !strings.HasPrefix(name, kept) || len(s) > MaxNameLen || len(kept) <= MaxNameLen-3-utf8.UTFMax {
					t.Errorf("%d ASCII bytes then %q..., cut to %q (%d bytes); want a prefix of valid UTF-8 less than one character short of %d bytes, then \"...\"",
						pad, r, s, len(s), MaxNameLen-3)
				}
			}
		}
	}
	// A name of single bytes is cut to MaxNameLen bytes exactly.
	name := strings.Repeat("m", 2*MaxNameLen)
	if got := cut(name); len(got) != MaxNameLen || got != name[:MaxNameLen-3]+"..." {
		t.Errorf("cut of %d ASCII bytes = %d bytes, want %d", len(name), len(got), MaxNameLen)
	}
}
