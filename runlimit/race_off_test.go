//go:build !race

package runlimit

// raceEnabled reports whether the race detector instruments this test
// binary; tests that are costly under it run a smaller case then, and the
// Makefile runs their full size without it.
const raceEnabled = false
