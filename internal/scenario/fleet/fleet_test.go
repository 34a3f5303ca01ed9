package fleet

import (
	"math"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/loadgen"
	"github.com/levee-go/levee/internal/report"
)

// runOf is a run of two 2 s phases whose seconds admitted the given
// counts.
func runOf(perSecond ...int64) report.Run {
	res := &loadgen.Result{}
	for k, n := range perSecond {
		res.Seconds = append(res.Seconds, loadgen.Second{Offset: time.Duration(k) * time.Second, Length: time.Second, Stats: loadgen.Stats{Succeeded: n}})
	}
	for j, name := range []string{PhaseSkew, PhaseShift} {
		ph := loadgen.PhaseResult{Phase: loadgen.Phase{Name: name, Duration: 2 * time.Second}, Offset: time.Duration(2*j) * time.Second}
		ph.Succeeded = perSecond[2*j] + perSecond[2*j+1]
		res.Phases = append(res.Phases, ph)
	}
	return report.Run{Result: res}
}

func TestWindows(t *testing.T) {
	runs := []report.Run{runOf(80, 90, 10, 10), runOf(10, 10, 10, 5), runOf(10, 10, 80, 75)}
	got := Windows("direct", runs, 100)
	want := []Window{
		{Pass: "direct", Phase: PhaseSkew, Rate: 105, Min: 100, Max: 110, Error: 0.05},
		{Pass: "direct", Phase: PhaseShift, Rate: 95, Min: 90, Max: 100, Error: -0.05},
	}
	if len(got) != len(want) {
		t.Fatalf("Windows() = %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Pass != w.Pass || g.Phase != w.Phase || g.Rate != w.Rate || g.Min != w.Min || g.Max != w.Max || math.Abs(g.Error-w.Error) > 1e-9 {
			t.Errorf("Windows()[%d] = %+v, want %+v", i, g, w)
		}
	}
}

func TestFleetMeasure(t *testing.T) {
	runs := []report.Run{runOf(80, 90, 10, 10), runOf(10, 10, 10, 5), runOf(10, 10, 80, 75)}
	m := fleetMeasure(runs)
	var want []report.MeasureSample
	for k, v := range []float64{0, 100, 210, 310, 400} {
		want = append(want, report.MeasureSample{At: time.Duration(k) * time.Second, Value: v})
	}
	if m.Name != FleetMeasure || m.Level || len(m.Samples) != len(want) {
		t.Fatalf("fleetMeasure() = %+v, want a count named %q with samples %v", m, FleetMeasure, want)
	}
	for i := range want {
		if m.Samples[i] != want[i] {
			t.Errorf("sample %d = %+v, want %+v", i, m.Samples[i], want[i])
		}
	}
}
