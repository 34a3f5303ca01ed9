package loadgen_test

import (
	"context"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
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
			call := func(context.Context) error { return nil }
			phases := []loadgen.Phase{{Name: "p", Duration: time.Second, Rate: 1}}
			// The option after the nil one is applied: a bad value in it
			// is reported.
			if _, err := loadgen.New(call, phases, nil, loadgen.WithMaxInFlight(0), nil); err == nil {
				t.Error("New(call, phases, nil, WithMaxInFlight(0), nil) = nil, want an error")
			}
			if _, err := loadgen.New(call, phases, nil, loadgen.WithSeed(7), nil); err != nil {
				t.Errorf("New(call, phases, nil, WithSeed(7), nil) = %v, want nil", err)
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
