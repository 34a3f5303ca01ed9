package grpcguard

import (
	"slices"
	"testing"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/ratelimit"
)

// TestNilOptionIgnored: every constructor of grpcguard skips a nil option, before and after a real
// one, and applies the real one (CONTRIBUTING: "A nil option is
// ignored").
func TestNilOptionIgnored(t *testing.T) {
	tests := []struct {
		name string
		give func(t *testing.T)
	}{
		{"New", func(t *testing.T) {
			s, err := New(nilOptionRules(t), nil, WithExempt("/a.B/C"), nil)
			if err != nil {
				t.Fatalf("New(rules, nil, WithExempt(/a.B/C), nil) = %v, want nil", err)
			}
			if _, exempt := s.Rules(); !slices.Equal(exempt, []string{"/a.B/C"}) {
				t.Errorf("Rules() exempt = %q, want [/a.B/C]", exempt)
			}
		}},
		{"Swap", func(t *testing.T) {
			s := mustServer(t, nilOptionRules(t))
			if err := s.Swap(nilOptionRules(t), nil, WithExempt("/a.B/C"), nil); err != nil {
				t.Fatalf("Swap(rules, nil, WithExempt(/a.B/C), nil) = %v, want nil", err)
			}
			if _, exempt := s.Rules(); !slices.Equal(exempt, []string{"/a.B/C"}) {
				t.Errorf("Rules() exempt after Swap = %q, want [/a.B/C]", exempt)
			}
		}},
		{"NewClient", func(t *testing.T) {
			c, err := NewClient(nil, WithRetries(2), nil)
			if err != nil {
				t.Fatalf("NewClient(nil, WithRetries(2), nil) = %v, want nil", err)
			}
			if c.o.attempts != 2 {
				t.Errorf("NewClient(nil, WithRetries(2), nil): %d attempts, want 2", c.o.attempts)
			}
		}},
		// NewORCA: TestNewORCARejectsBadOptions.
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

// nilOptionRules is one rule limiting every method's rate.
func nilOptionRules(t *testing.T) []decide.Rule {
	return []decide.Rule{{Name: "r", Guards: []admission.Guard{ratelimit.NewGuard("rate", mustLimiter(t, 100, 10))}}}
}
