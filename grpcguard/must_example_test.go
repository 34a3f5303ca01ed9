package grpcguard_test

// must returns v, or panics if err is not nil: the examples' arguments are
// valid.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
