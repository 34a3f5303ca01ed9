package nilness

import "testing"

type reader interface{ Read() float64 }

type ptrReader struct{ v float64 }

func (r *ptrReader) Read() float64 { return r.v }

type funcReader func() float64

func (f funcReader) Read() float64 { return f() }

type valueReader struct{}

func (valueReader) Read() float64 { return 0 }

func TestIs(t *testing.T) {
	var nilPtr *ptrReader
	var nilFunc funcReader
	var nilMap map[string]int
	var nilSlice []int
	var nilChan chan int
	cases := []struct {
		name string
		v    any
		want bool
	}{
		{"untyped nil", nil, true},
		{"nil interface variable", reader(nil), true},
		{"nil pointer in an interface", reader(nilPtr), true},
		{"nil func in an interface", reader(nilFunc), true},
		{"nil map", nilMap, true},
		{"nil slice", nilSlice, true},
		{"nil channel", nilChan, true},
		{"pointer", reader(&ptrReader{v: 1}), false},
		{"func", reader(funcReader(func() float64 { return 1 })), false},
		{"value", reader(valueReader{}), false},
		{"zero int", 0, false},
		{"empty string", "", false},
		{"empty non-nil slice", []int{}, false},
	}
	for _, c := range cases {
		if got := Is(c.v); got != c.want {
			t.Errorf("%s: Is = %v, want %v", c.name, got, c.want)
		}
	}
}
