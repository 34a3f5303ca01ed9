package loadshed_test

import (
	"math"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/loadshed"
)

// scaleOf is a Scaler of one's own: it reads *s.
type scaleOf struct{ s *float64 }

func (f scaleOf) Scale() float64 { return *f.s }

// TestGuardNaNScale: a Scaler of one's own that reads NaN (a ratio of
// two zeros) is no evidence of overload: the guard admits every call
// while it does, as for a scale of 1 (Observe ignores a NaN reading, and
// so no Controller's scale is ever NaN), and sheds by the scale again,
// exactly, once the Scaler reads a number. Before, NaN made the credit
// added per call the conversion of NaN to an integer, which is not
// defined: on amd64 2^63, so that every call was admitted while the
// Scaler read NaN and the credit was left so large that the next 4 to 8
// billion calls were admitted whatever the scale said (where the
// conversion gives 0, every call would be refused, on no evidence).
func TestGuardNaNScale(t *testing.T) {
	scale := 0.5
	g := loadshed.NewGuard("shed", scaleOf{&scale}, time.Second)
	admitted := func(n int) (k int) {
		for range n {
			if d := g.Admit(admission.Call{Now: t0}); !d.Refused {
				k++
			}
		}
		return k
	}
	if got := admitted(1000); got != 500 {
		t.Fatalf("scale 0.5: %d of 1000 admitted, want 500", got)
	}
	scale = math.NaN()
	if got := admitted(1000); got != 1000 {
		t.Errorf("scale NaN: %d of 1000 admitted, want every one (no evidence of overload)", got)
	}
	scale = 0.5
	if got := admitted(1000); got != 500 {
		t.Errorf("scale 0.5 after NaN: %d of 1000 admitted, want 500", got)
	}
	for _, s := range []float64{math.Inf(1), 2} {
		scale = s
		if got := admitted(100); got != 100 {
			t.Errorf("scale %v: %d of 100 admitted, want every one", s, got)
		}
	}
}
