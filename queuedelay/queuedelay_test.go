package queuedelay

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

func TestQueueGuardEpisodes(t *testing.T) {
	g := mustNew(t, 5*time.Millisecond, 100*time.Millisecond)
	t0 := g.epoch
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	type sample struct {
		at      float64 // ms after t0
		queued  float64 // ms
		refused bool
		over    bool // Overloaded() after it
	}
	steps := []sample{
		{0, 10, false, false},    // opens the first interval
		{50, 30, false, false},   // above target, but no episode yet
		{100, 20, true, true},    // closes [0,100): min 10 > 5, an episode; 20 > target: refused
		{120, 8, true, true},     // during an episode, 8ms > target: refused
		{150, 4, false, true},    // under target: admitted
		{210, 3, false, false},   // closes [100,210): min 4 < 5, episode over
		{230, 60, false, false},  // not in an episode: only > interval is refused
		{260, 150, true, false},  // waited longer than the interval: refused anyway
		{320, 120, true, false},  // closes [210,320): min 3, no episode; 120 > interval
		{400, 70, false, false},  // 70 < interval
		{430, 4.9, false, true},  // closes [320,430): min 70, an episode; 4.9 under target
		{540, 4.9, false, false}, // closes [430,540): min 4.9, over
	}
	for i, s := range steps {
		d := g.Recheck(admission.Call{Now: t0.Add(ms(s.at)), Queued: ms(s.queued)})
		if d.Refused != s.refused || g.Overloaded() != s.over {
			t.Errorf("step %d: Recheck(at %vms, queued %vms) refused=%v overloaded=%v, want %v %v",
				i, s.at, s.queued, d.Refused, g.Overloaded(), s.refused, s.over)
		}
		want := float32(100) // outside an episode: the interval
		if s.over {
			want = 5 // in an episode: the target
		}
		if d.Refused && (d.Cause != admission.CauseQueueDelay || d.Evidence != admission.EvidenceQueueDelay || d.Threshold != want ||
			math.Abs(float64(d.Value)-s.queued) > 1e-3) {
			t.Errorf("step %d: refusal cause %v, evidence %v, value %v, threshold %v; want CauseQueueDelay on queue_delay, %v against %v (ms)",
				i, d.Cause, d.Evidence, d.Value, d.Threshold, s.queued, want)
		}
	}
	if got := g.Episodes(); got != 2 {
		t.Errorf("queuedelay.Guard.Episodes() = %d, want 2", got)
	}
}

// TestQueueDelayThroughServer: the queueing delay between tap and handler
// is what the queue guard sees.
func mustNew(t *testing.T, target, interval time.Duration) *Guard {
	t.Helper()
	g, err := New(target, interval)
	if err != nil {
		t.Fatalf("New(%v, %v): %v", target, interval, err)
	}
	return g
}

func TestNewRejectsBadValues(t *testing.T) {
	tests := []struct {
		name             string
		target, interval time.Duration
		want             []string
	}{
		{"zero target", 0, time.Second, []string{"target must be > 0, got 0s"}},
		{"negative target", -time.Millisecond, time.Second, []string{"target must be > 0, got -1ms"}},
		{"interval below target", 10 * time.Millisecond, 5 * time.Millisecond, []string{"interval must be >= target (10ms) and > 0, got 5ms"}},
		{"both", 0, 0, []string{"target must be > 0, got 0s", "interval must be >= target (0s) and > 0, got 0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := New(tt.target, tt.interval)
			if g != nil || err == nil {
				t.Fatalf("New(%v, %v) = %v, %v; want nil and an error", tt.target, tt.interval, g, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), "queuedelay: "+w) {
					t.Errorf("New(%v, %v) error %q does not contain %q", tt.target, tt.interval, err, "queuedelay: "+w)
				}
			}
		})
	}
}
