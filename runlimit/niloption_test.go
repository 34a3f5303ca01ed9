package runlimit

import (
	"testing"
)

// TestNilOptionIgnored: New skips a nil option, before and after a real
// one, and applies the real one (CONTRIBUTING: "A nil option is
// ignored").
func TestNilOptionIgnored(t *testing.T) {
	tests := []struct {
		name string
		give func(t *testing.T)
	}{
		{"New", func(t *testing.T) {
			l, err := New(nil, WithBounds(2, 10), nil)
			if err != nil {
				t.Fatalf("New(nil, WithBounds(2, 10), nil) = %v, want nil", err)
			}
			if floor, ceiling := l.Bounds(); floor != 2 || ceiling != 10 {
				t.Errorf("Bounds() = %d, %d; want 2, 10", floor, ceiling)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s with a nil option panicked: %v", tt.name, r)
				}
			}()
			tt.give(t)
		})
	}
}
