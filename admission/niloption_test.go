package admission_test

import (
	"testing"

	"github.com/levee-go/levee/admission"
)

// TestNilOptionIgnored: NewChain skips a nil option, before and after a real
// one, and applies the real one (CONTRIBUTING: "A nil option is
// ignored").
func TestNilOptionIgnored(t *testing.T) {
	tests := []struct {
		name string
		give func(t *testing.T)
	}{
		{"NewChain", func(t *testing.T) {
			ch, err := admission.NewChain("r", []admission.Guard{&plain{name: "g", refuse: true}}, nil, admission.WithShadow(true), nil)
			if err != nil {
				t.Fatalf("NewChain(r, [g], nil, WithShadow(true), nil) = %v, want nil", err)
			}
			var c admission.Call
			c.Now = t0
			var ps admission.Permits
			if i, d := ch.Enter(&c, &ps); i >= 0 {
				t.Errorf("Enter() = %d %+v with a refusing guard, want admitted in shadow mode", i, d)
			}
			ch.Finish(&c, &ps, admission.Outcome{})
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
