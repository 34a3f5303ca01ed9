package capacity

import "testing"

func TestEstimate(t *testing.T) {
	got, err := Estimate(0)
	if err != nil || !(got > 0) {
		t.Errorf("Estimate(0) = %v, %v; want > 0, nil", got, err)
	}
	if _, err := Estimate(-1); err == nil {
		t.Errorf("Estimate(-1) error = nil, want the inventory server's option error")
	}
}
