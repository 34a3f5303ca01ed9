package decide

import (
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// BenchmarkNoteRefusal is what a refusal pays to know whether refusals are
// sustained: one run of refusals a microsecond apart.
func BenchmarkNoteRefusal(b *testing.B) {
	var s sustained
	d := admission.Refuse("full", time.Second)
	now := time.Unix(1000, 0)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		if s.refused(now, d) {
			n++
		}
	}
	if n == 0 {
		b.Fatal("never sustained")
	}
}
