package bulkhead

import "testing"

// mustNew is New for arguments a test knows to be valid.
func mustNew(tb testing.TB, limit int, opts ...Option) *Bulkhead {
	tb.Helper()
	b, err := New(limit, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// mustAdaptive is NewAdaptive for options a test knows to be valid.
func mustAdaptive(tb testing.TB, opts ...Option) *Adaptive {
	tb.Helper()
	a, err := NewAdaptive(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}
