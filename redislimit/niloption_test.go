package redislimit

import (
	"strings"
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
			_, c := single(t)
			l := mustNew(t, c, "nil-option", 10, 1, nil, WithPrefix("levee-nil"), nil)
			if !strings.HasPrefix(l.base, "levee-nil:") {
				t.Errorf("New(..., nil, WithPrefix(levee-nil), nil): keys %q, want the prefix", l.base)
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
