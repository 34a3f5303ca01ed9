package throttle

import "testing"

// mustNew is New for options a test knows to be valid.
func mustNew(tb testing.TB, opts ...Option) *Throttle {
	tb.Helper()
	th, err := New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return th
}
