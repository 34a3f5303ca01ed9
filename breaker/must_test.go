package breaker

import "testing"

// mustNew is New for options a test knows to be valid.
func mustNew(tb testing.TB, opts ...Option) *Breaker {
	tb.Helper()
	b, err := New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
