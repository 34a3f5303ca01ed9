package retrybudget

import (
	"testing"
	"time"
)

// TestStepBackKeepsBudget: a clock that steps back a whole window or more
// (an injected clock, a wall-clock step) must not turn the budget off. The
// retries asked at the earlier instant are counted in the ring's newer
// bins (add), so they must be judged with them: at most ratio × requests
// plus the minimum of the window that holds them. Before, TryRetryAt
// judged them against the older window, which held none of them, and
// granted every retry.
func TestStepBackKeepsBudget(t *testing.T) {
	b := mustNew(t, WithWindow(10*time.Second, 10)) // ratio 0.1, no minimum
	later := t0.Add(30 * time.Second)
	for range 100 {
		b.RequestAt(later) // 100 requests: 10 retries in budget
	}
	if got := retries(b, later, 20); got != 10 {
		t.Fatalf("at t0+30s: %d of 20 retries granted, want 10", got)
	}
	// The clock steps back 30s: the budget is spent, and stays spent.
	if got := retries(b, t0, 1000); got != 0 {
		t.Fatalf("after a step back of 30s: %d of 1000 retries granted with the budget spent, want 0 (snapshot at t0+30s %+v)",
			got, b.SnapshotAt(later))
	}
	// A budget that saw no request grants nothing after a step back either.
	b = mustNew(t, WithWindow(10*time.Second, 10))
	b.TryRetryAt(later) // refused: stamps the ring with later's bins
	b.RequestAt(later)
	if got := retries(b, t0, 1000); got != 0 {
		t.Fatalf("one request, then a step back of 30s: %d of 1000 retries granted, want 0", got)
	}
}
