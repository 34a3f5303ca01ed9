package inventory_test

import (
	"testing"

	"github.com/levee-go/levee/examples/inventory"
)

// TestNilOptionIgnored: NewServer skips a nil option, before and after a real
// one, and applies the real one (CONTRIBUTING: "A nil option is
// ignored").
func TestNilOptionIgnored(t *testing.T) {
	tests := []struct {
		name string
		give func(t *testing.T)
	}{
		{"NewServer", func(t *testing.T) {
			s, err := inventory.NewServer(nil, inventory.WithStock("sku-1", 5), nil)
			if err != nil {
				t.Fatalf("NewServer(nil, WithStock(sku-1, 5), nil) = %v, want nil", err)
			}
			if st, ok := s.Stock("sku-1"); !ok || st.Initial != 5 {
				t.Errorf("Stock(sku-1) = %+v, %t; want 5 initial units", st, ok)
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
