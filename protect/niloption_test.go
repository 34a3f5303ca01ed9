package protect_test

import (
	"testing"

	"github.com/levee-go/levee/protect"
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
			p, err := protect.New(nil, protect.WithoutCPU(), nil)
			if err != nil {
				t.Fatalf("New(nil, WithoutCPU(), nil) = %v, want nil", err)
			}
			defer p.Stop()
			if p.CPU() != nil {
				t.Error("New(nil, WithoutCPU(), nil).CPU() != nil, want no monitor")
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
