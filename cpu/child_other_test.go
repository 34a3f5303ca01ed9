//go:build !linux

package cpu

// runChild: the pinned-process test and its child roles are Linux only.
func runChild() bool { return false }
