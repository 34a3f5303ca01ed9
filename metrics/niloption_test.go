package metrics_test

import (
	"strings"
	"testing"

	"github.com/levee-go/levee/metrics"
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
			reg := metrics.New(nil, metrics.WithRuntimeMetrics(), nil)
			families, err := reg.Gather()
			if err != nil {
				t.Fatalf("Gather() = %v", err)
			}
			runtime := false
			for _, f := range families {
				runtime = runtime || strings.HasPrefix(f.GetName(), "go_")
			}
			if !runtime {
				t.Error("New(nil, WithRuntimeMetrics(), nil).Gather() has no go_* series, want the runtime collector")
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
