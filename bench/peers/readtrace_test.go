package main

import (
	"testing"
	"time"
)

// TestReadTrace: reads 1 ms and then 4 ms apart make three reads, a
// longest gap of 4 ms and 4 ms of quiet (gaps over 2 ms); a take starts
// the counts anew, keeping the last read as the start of the next gap.
func TestReadTrace(t *testing.T) {
	var tr readTrace
	t0 := time.Unix(1_700_000_000, 0)
	tr.note(t0)
	tr.note(t0.Add(time.Millisecond))
	tr.note(t0.Add(5 * time.Millisecond))
	if got, want := tr.take(), " reads 3 maxgap 4ms quiet 4ms"; got != want {
		t.Errorf("take() = %q, want %q", got, want)
	}
	tr.note(t0.Add(8 * time.Millisecond))
	if got, want := tr.take(), " reads 1 maxgap 3ms quiet 3ms"; got != want {
		t.Errorf("second take() = %q, want %q", got, want)
	}
	if got, want := tr.take(), " reads 0 maxgap 0s quiet 0s"; got != want {
		t.Errorf("take() of nothing = %q, want %q", got, want)
	}
}
