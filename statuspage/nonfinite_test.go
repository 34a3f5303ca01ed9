package statuspage

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/levee-go/levee/decide"
)

// TestJSONWithNonFiniteFigure: a CPU signal of one's own that divides by
// zero reads +Inf or NaN, which JSON cannot carry. The text form shows
// it; the JSON form used to answer 200 OK with an empty body (the
// encoder's error was dropped). It must say what went wrong, not pass
// for a page.
func TestJSONWithNonFiniteFigure(t *testing.T) {
	for _, v := range []float64{math.Inf(1), math.NaN()} {
		p := New(Sources{CPU: cpuAt{v, 0.8}})
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/levee?format=json", nil))
		if rec.Code == http.StatusOK && rec.Body.Len() == 0 {
			t.Errorf("utilisation %v: JSON page is 200 OK with an empty body", v)
			continue
		}
		if rec.Code == http.StatusOK {
			continue
		}
		if !strings.Contains(rec.Body.String(), "statuspage") {
			t.Errorf("utilisation %v: JSON page %d %q does not say what failed", v, rec.Code, rec.Body.String())
		}
	}
}

// TestJSONWithARefusalOfNonFiniteFigure: a refusal whose guard of one's
// own reported a NaN or infinite figure is kept with 0 there, as its
// ErrorInfo gives it, and the JSON page (what `levee status` reads) is
// 200. It was a 500 for as long as that refusal was among the last kept.
func TestJSONWithARefusalOfNonFiniteFigure(t *testing.T) {
	for _, v := range []float32{float32(math.Inf(1)), float32(math.NaN())} {
		p := New(Sources{})
		p.Record(decide.RefusalEvent{Refusal: decide.Refusal{Guard: "mine", Reason: decide.ReasonOverloaded, Value: v, Threshold: v}})
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/levee?format=json", nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"guard": "mine"`) {
			t.Errorf("a refusal of value %v: JSON page %d %q, want 200 with the refusal", v, rec.Code, rec.Body.String())
		}
	}
}
