package runlimit

import (
	"testing"
	"time"
)

// BenchmarkRefusalEvidence is what a refusal pays for its evidence: the
// facts read at an instant, the first rule that holds, and its measure,
// here with a spike's evidence (calls asked for turns and none ended).
func BenchmarkRefusalEvidence(b *testing.B) {
	l, err := New()
	if err != nil {
		b.Fatal(err)
	}
	ln := l.Flow("/svc/Call").Lane("", 0)
	l.offered.Add(100)
	now := time.Now()
	b.ReportAllocs()
	var sum float32
	for b.Loop() {
		v := l.look(ln, l.nanos(now))
		e := v.first()
		sum += float32(e.Value + e.Threshold)
	}
	if sum == 0 {
		b.Fatal("no evidence measured")
	}
}
