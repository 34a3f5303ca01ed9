package metrics

import (
	"context"
	"testing"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/memshed"
)

// TestMemShedEmptyMethodName: a call whose method is "" (an
// httpguard.WithFlow that returns "" for a request without its header, a
// front-end of one's own) must not break the scrape. Its method got a
// cost of its own named "", beside the shared entry whose name is ""
// too: two series levee_memshed_method_cost_bytes{method=""}, and every
// scrape of the Registry failed (HTTP 500).
func TestMemShedEmptyMethodName(t *testing.T) {
	s, err := memshed.NewManual("memory", fixedMemory{0.5})
	if err != nil {
		t.Fatal(err)
	}
	s.Tick(t0)
	for _, m := range []string{"/pkg.Svc/M", "", ""} {
		var c admission.Call
		c.Init(context.Background(), m, t0)
		d := s.Start(c, admission.Permit{})
		s.Finish(c, d.Permit, admission.Outcome{})
	}
	var c admission.Call
	c.Init(context.Background(), "/pkg.Svc/New", t0)
	d := s.Start(c, admission.Permit{}) // a method not served yet: the shared entry
	defer s.Finish(c, d.Permit, admission.Outcome{Err: context.Canceled})
	r := newTestRegistry()
	if err := r.AddMemShed("memory", s); err != nil {
		t.Fatalf("AddMemShed: %v", err)
	}
	if _, err := r.Gather(); err != nil {
		t.Fatalf("Gather: %v", err)
	}
}
