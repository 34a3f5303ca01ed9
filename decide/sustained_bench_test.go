package decide

import (
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// BenchmarkNoteRefusal is what a refusal pays to know whether refusals are
// sustained: refusals a microsecond apart, in a run already sustained
// before the timer starts, so that every iteration, however few
// (-benchtime 1x), takes the path of a sustained overload.
func BenchmarkNoteRefusal(b *testing.B) {
	var s sustained
	d := admission.Refuse("full", time.Second)
	now := time.Unix(1000, 0)
	for end := now.Add(SustainedAfter); !now.After(end); now = now.Add(SustainedGap / 2) {
		s.refused(now, d)
	}
	b.ReportAllocs()
	n, sustainedN := 0, 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		n++
		if s.refused(now, d) {
			sustainedN++
		}
	}
	if sustainedN != n {
		b.Fatalf("%d of %d refusals sustained, want all", sustainedN, n)
	}
}
