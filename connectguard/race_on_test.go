//go:build race

package connectguard

// raceEnabled reports whether the race detector instruments this test
// binary. Under it sync.Pool drops items at random, so connect-go's own
// allocations per call vary and allocation counts cannot be compared; the
// Makefile runs those tests without it.
const raceEnabled = true
