//go:build !unix

package protect

// fdLimit returns false: no limit on open file descriptors is read here.
func fdLimit() (uint64, bool) { return 0, false }
