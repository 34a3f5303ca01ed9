package cpu

import "testing"

// mustManual is NewManual for options a test knows to be valid.
func mustManual(tb testing.TB, opts ...Option) *Monitor {
	tb.Helper()
	m, err := NewManual(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}
