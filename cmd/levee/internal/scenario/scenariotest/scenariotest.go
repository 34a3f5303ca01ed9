// Package scenariotest holds what the tests of the demo's scenarios share.
package scenariotest

import (
	"bytes"
	"sync"
	"testing"

	"github.com/levee-go/levee/internal/harness/report"
)

// Buffer is a bytes.Buffer safe for concurrent writes, for a scenario's
// stdout and stderr. The zero value is empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// CheckRunsComplete checks that a demo compared an unprotected and a
// protected run, and that both completed: three phases, every request with
// an outcome, and calls served in the first phase. It returns the runs.
func CheckRunsComplete(t testing.TB, runs []report.Run) []report.Run {
	t.Helper()
	if len(runs) != 2 || runs[0].Name != "unprotected" || runs[1].Name != "protected" {
		t.Fatalf("runs = %d, want unprotected and protected", len(runs))
	}
	for _, r := range runs {
		if len(r.Result.Phases) != 3 {
			t.Fatalf("%s run has %d phases, want 3", r.Name, len(r.Result.Phases))
		}
		tot := r.Result.Total
		if tot.Offered == 0 || tot.Offered != tot.Dropped+tot.Succeeded+tot.RefusedTotal()+tot.TimedOut+tot.FailedTotal() {
			t.Errorf("%s run: offered %d is not the sum of its outcomes %+v", r.Name, tot.Offered, tot)
		}
		if r.Result.Phases[0].Succeeded == 0 {
			t.Errorf("%s run: no call succeeded in the first phase", r.Name)
		}
	}
	return runs
}
