package statuspage

import (
	"testing"

	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/memory"
)

// TestNilPointerSources: Sources says a nil field is left off the page;
// a nil *cpu.Monitor or *memory.Monitor (a server run without one, as
// `levee serve` can be) is nil to the caller who sets it. Status used to
// call it and panic, on every request for the page.
func TestNilPointerSources(t *testing.T) {
	var mon *cpu.Monitor
	var mem *memory.Monitor
	p := New(Sources{CPU: mon, Memory: mem})
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Status with nil-pointer sources panicked: %v", r)
		}
	}()
	if st := p.Status(); len(st.Signals) != 0 {
		t.Errorf("Status().Signals = %+v, want none", st.Signals)
	}
}
