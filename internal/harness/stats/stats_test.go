package stats

import (
	"context"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/levee-go/levee/examples/inventory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRecorderAndClient serves a Recorder and reads it with a Client.
func TestRecorderAndClient(t *testing.T) {
	srv, err := inventory.NewServer(inventory.WithCPUWork(0))
	if err != nil {
		t.Fatal(err)
	}
	g := &Gauges{}
	g.Set("scale", func() float64 { return 0.5 })
	g.Set("broken", math.NaN)
	rec := StartRecorder(srv, g, true, 123, time.Hour)
	defer rec.Stop()
	hs := httptest.NewServer(rec)
	defer hs.Close()

	c := NewClient(strings.TrimPrefix(hs.URL, "http://"), 5*time.Second)
	defer c.Close()
	doc, err := c.Fetch(context.Background(), time.Time{})
	if err != nil {
		t.Fatalf("Fetch() error = %v", err)
	}
	// The sample taken at start and the one taken for the request.
	if !doc.Protected || doc.Capacity != 123 || doc.CPUs < 1 || len(doc.Samples) != 2 {
		t.Fatalf("Fetch() = %+v, want protected, capacity 123, CPUs >= 1 and 2 samples", doc)
	}
	if got := doc.Samples[1].Gauges; len(got) != 1 || got["scale"] != 0.5 {
		t.Errorf("Fetch() gauges = %v, want only scale 0.5 (NaN is left out)", got)
	}
	doc, err = c.Fetch(context.Background(), time.Now().Add(time.Hour))
	if err != nil || len(doc.Samples) != 1 {
		t.Errorf("Fetch(since an hour ahead) = %d samples, %v; want only the one taken for the request", len(doc.Samples), err)
	}
}

func TestToReport(t *testing.T) {
	start := time.Unix(100, 0)
	doc := Doc{CPUs: 2, Samples: []Sample{
		{Time: start.UnixNano(), Calls: 1, CPUSeconds: 10},
		{Time: start.Add(time.Second).UnixNano(), Calls: 5, Late: 1, Canceled: 2, CPUSeconds: 11, Gauges: map[string]float64{"scale": 0.25}},
		{Time: start.Add(2 * time.Second).UnixNano(), Calls: 6, CPUSeconds: -1},
	}}
	got := toReport(doc, start)
	if len(got) != 3 {
		t.Fatalf("toReport() = %d samples, want 3", len(got))
	}
	if s := got[0]; s.At != 0 || s.Calls != 1 || !math.IsNaN(s.CPU) || !math.IsNaN(s.Scale) {
		t.Errorf("toReport()[0] = %+v, want at 0, 1 call, CPU and scale unknown", s)
	}
	if s := got[1]; s.At != time.Second || s.Calls != 5 || s.Wasted != 3 || s.CPU != 0.5 || s.Scale != 0.25 {
		t.Errorf("toReport()[1] = %+v, want at 1s, 5 calls, 3 wasted, CPU 0.5 (1s over 2 CPUs in 1s), scale 0.25", s)
	}
	if s := got[2]; !math.IsNaN(s.CPU) {
		t.Errorf("toReport()[2].CPU = %v, want NaN (CPU time unknown)", s.CPU)
	}
}
