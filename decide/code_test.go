package decide

import "testing"

func TestCodeOverload(t *testing.T) {
	for c := Code(0); c <= 16; c++ {
		want := c == DeadlineExceeded || c == ResourceExhausted || c == Unavailable
		if got := c.Overload(); got != want {
			t.Errorf("%v.Overload() = %v, want %v", c, got, want)
		}
	}
}
