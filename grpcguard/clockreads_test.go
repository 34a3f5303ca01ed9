package grpcguard

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/clock/clocktest"
	"github.com/levee-go/levee/internal/guardtest"
	"github.com/levee-go/levee/runlimit"
)

// TestTurnAtOnceReadsNoClockAtHandlerStart: a tapped call of a short
// method that takes its run-limit turn at once reads the clock three
// times, at the tap, at its handler's start (how long it queued) and at
// its end: the turn reports that it waited for nothing
// (admission.Traits.ReportsWait), so the handler's start needs no fourth
// reading. Beside a Starter that may block without saying so
// (guardtest.Forced declares nothing) the handler's start is read again.
func TestTurnAtOnceReadsNoClockAtHandlerStart(t *testing.T) {
	for _, tc := range []struct {
		name      string
		unknown   bool // a Starter that does not report its waits, beside the run limit
		wantReads int64
	}{
		{"run limit alone", false, 3},
		{"and a Starter that does not report", true, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.New(time.Now())
			l, err := runlimit.New()
			if err != nil {
				t.Fatal(err)
			}
			f, now := l.Flow(emptyCall), time.Now()
			for range 5 { // a mean of 50µs: a short method, whose calls do not yield
				tk, _ := f.TryAcquire(now)
				tk.Done(now.Add(50*time.Microsecond), false)
			}
			guards := []admission.Guard{runlimit.NewGuard("run", l)}
			if tc.unknown {
				guards = append(guards, new(guardtest.Forced))
			}
			s := mustServer(t, []decide.Rule{{Guards: guards}})
			var reads atomic.Int64
			s.clock.Fake = func() time.Time { reads.Add(1); return clk.Now() }
			handled, err := tapThenHandle(t, s, clk, context.Background(), 0)
			if !handled || err != nil {
				t.Fatalf("handled %v, err %v; want handled", handled, err)
			}
			if got := reads.Load(); got != tc.wantReads {
				t.Errorf("clock read %d times for the call, want %d", got, tc.wantReads)
			}
		})
	}
}
