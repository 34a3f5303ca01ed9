//go:build linux

package cpu

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestRealSourceSeesBurn runs the detected source of this machine for
// about a second: idle, then while a goroutine burns CPU. Utilisation
// must rise by a good part of one CPU's share of the allowance.
func TestRealSourceSeesBurn(t *testing.T) {
	src, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("detected: %s", src)
	s0, err := src.Sample()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond)
	s1, err := src.Sample()
	if err != nil {
		t.Fatal(err)
	}
	idle := Utilization(s0, s1)

	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		x := 0
		for !stop.Load() {
			for i := 0; i < 10000; i++ {
				x += i
			}
		}
		_ = x
	}()
	s2, _ := src.Sample()
	time.Sleep(750 * time.Millisecond)
	s3, err := src.Sample()
	stop.Store(true)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	busy := Utilization(s2, s3)
	// One burning goroutine adds one CPU of demand: 1/allowance of the
	// allowance, up to what is left.
	expect := min(1/s3.Allowance, 1-idle)
	t.Logf("allowance %.2f CPUs: idle %.3f, burning %.3f (expected rise %.3f)", s3.Allowance, idle, busy, expect)
	if busy-idle < 0.5*expect {
		t.Errorf("utilisation rose from %.3f to %.3f while burning, want a rise >= %.3f", idle, busy, 0.5*expect)
	}
}
