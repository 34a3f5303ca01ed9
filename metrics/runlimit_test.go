package metrics

import (
	"testing"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/runlimit"
)

type fixedMisordered uint64

func (f fixedMisordered) Misordered() uint64 { return uint64(f) }

// TestRunLimitTable: the run limit's table of flows and tenants, and the
// ORCA reports levee could not add to.
func TestRunLimitTable(t *testing.T) {
	l, err := runlimit.New()
	if err != nil {
		t.Fatal(err)
	}
	l.Flow("/s/A")
	l.Flow("/s/B").Lane("acme", admission.Critical)
	r := newTestRegistry()
	if err := r.AddRunLimit("run", l); err != nil {
		t.Fatal(err)
	}
	if err := r.AddORCA(fixedMisordered(3)); err != nil {
		t.Fatal(err)
	}
	if err := r.AddORCA(fixedMisordered(3)); err == nil {
		t.Error("a second AddORCA: nil error, want ErrDuplicate")
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_runlimit_flows{name="run"}`:                 "2",
		`levee_runlimit_flows_forgotten_total{name="run"}`: "0",
		`levee_runlimit_tenants{name="run"}`:               "1",
		`levee_orca_misordered_total`:                      "3",
	}, "levee_runlimit_flows", "levee_runlimit_tenants", "levee_orca_")
}
