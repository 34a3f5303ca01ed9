package overload

import (
	"sync"
	"testing"
	"time"
)

// TestRunNewRunNotSustainedConcurrently: refusals that begin a new run
// together, long after an earlier run was sustained, are not sustained:
// none of them may measure the new run from the old run's start. Before
// the fix (the latest refusal swapped before the new start was stored) a
// refusal that came between the two did, in about half the runs of this
// test on two cores; the order of the stores now rules it out.
func TestRunNewRunNotSustainedConcurrently(t *testing.T) {
	const goroutines, rounds = 8, 100000
	bad := 0
	for range rounds {
		var r Run
		for at := time.Duration(1); at <= 2*SustainedAfter; at += 10 * time.Millisecond {
			r.Note(int64(at))
		}
		// A pause far longer than SustainedGap, then a new run.
		start := int64(time.Hour)
		var wg sync.WaitGroup
		var mu sync.Mutex
		gate := make(chan struct{})
		for i := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				if got := r.Note(start + int64(i)); got.Holds {
					mu.Lock()
					bad++
					mu.Unlock()
				}
			}()
		}
		close(gate)
		wg.Wait()
	}
	if bad > 0 {
		t.Errorf("Run.Note: %d refusals at the start of a new run held as sustained, measured from the earlier run's start", bad)
	}
}
