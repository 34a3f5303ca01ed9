package metrics

import (
	"testing"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// admitsAll is a guard that admits every call.
type admitsAll struct{}

func (admitsAll) Name() string                                               { return "pass" }
func (admitsAll) Admit(admission.Call) admission.Decision                    { return admission.Decision{} }
func (admitsAll) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// engineServer exports an engine as a server: its chains' counts, the
// handlers started (none here) and its refusals.
type engineServer struct{ *decide.Engine }

func (engineServer) HandlerStarts() uint64 { return 0 }

// TestRefusalsOfEvidenceOutOfRangeScrape: refusals a guard of one's own
// made with an Evidence byte out of range are exported under evidence
// "none" beside those made with none, in one series; two series of the
// same labels failed every scrape.
func TestRefusalsOfEvidenceOutOfRangeScrape(t *testing.T) {
	e, err := decide.New([]decide.Rule{{Guards: []admission.Guard{admitsAll{}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []admission.Evidence{admission.EvidenceNone, admission.EvidenceKinds, 200} {
		e.Refused(decide.RefusalEvent{Refusal: decide.NewRefusal(0, "mine", admission.RefuseFor(admission.CauseRateLimited, ev, "x", 0), "")})
		e.Refused(decide.RefusalEvent{Refusal: decide.Refusal{Guard: "mine", Reason: decide.ReasonOverloaded, Evidence: ev}})
	}
	r := newTestRegistry()
	if err := r.AddServer(engineServer{e}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Gather(); err != nil {
		t.Errorf("Gather: %v", err)
	}
}
