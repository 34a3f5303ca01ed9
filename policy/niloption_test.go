package policy_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/levee-go/levee/policy"
)

// TestNilOptionIgnored: NewReloader skips a nil option, before and after a real
// one, and applies the real one (CONTRIBUTING: "A nil option is
// ignored").
func TestNilOptionIgnored(t *testing.T) {
	tests := []struct {
		name string
		give func(t *testing.T)
	}{
		{"NewReloader", func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "policy.yaml")
			if err := os.WriteFile(path, []byte("preset: {max_rate: 100/s}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			r, err := policy.NewReloader(path, nil, policy.WithoutCPU(), nil)
			if err != nil {
				t.Fatalf("NewReloader(path, nil, WithoutCPU(), nil) = %v, want nil", err)
			}
			defer r.Close()
			if r.CPU() != nil {
				t.Error("NewReloader(path, nil, WithoutCPU(), nil).CPU() != nil, want no monitor")
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
