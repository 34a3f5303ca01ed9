package ratelimit

import "testing"

// mustLimiter is NewLimiter for arguments a test knows to be valid.
func mustLimiter(tb testing.TB, r Limit, b int) *Limiter {
	tb.Helper()
	l, err := NewLimiter(r, b)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// mustKeyed is NewKeyed for arguments a test knows to be valid.
func mustKeyed(tb testing.TB, r Limit, b int, opts ...KeyedOption) *Keyed {
	tb.Helper()
	k, err := NewKeyed(r, b, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}
