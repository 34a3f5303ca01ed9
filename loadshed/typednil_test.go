package loadshed_test

import (
	"testing"
	"time"

	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/ratelimit"
)

// TestNilPointerScalerAndTarget: a nil *Controller given to NewGuard and
// a nil *ratelimit.Limiter given to New as a Target are nil to their
// caller, and New and NewGuard panic on them as their docs say, at once,
// not later on a request path or the Follow goroutine (where a nil
// *Controller's Scale or a nil Limiter's SetScaleAt panicked).
func TestNilPointerScalerAndTarget(t *testing.T) {
	panics := func(name string, f func()) {
		t.Helper()
		defer func() {
			t.Helper()
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	var ctl *loadshed.Controller
	panics("NewGuard with a nil *Controller", func() { loadshed.NewGuard("shed", ctl, time.Second) })
	var lim *ratelimit.Limiter
	panics("New with a nil *ratelimit.Limiter target", func() { _, _ = loadshed.New(loadshed.AIMD{}, []loadshed.Target{lim}) })
}
