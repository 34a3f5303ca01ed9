package deadline_test

import (
	"testing"
	"time"

	"github.com/levee-go/levee/deadline"
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
			g, err := deadline.New(nil, deadline.WithServiceTime("/a.B/C", 5*time.Millisecond), nil)
			if err != nil {
				t.Fatalf("New(nil, WithServiceTime(/a.B/C, 5ms), nil) = %v, want nil", err)
			}
			if got := g.ServiceTime("/a.B/C"); got != 5*time.Millisecond {
				t.Errorf("ServiceTime(/a.B/C) = %v, want 5ms", got)
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
