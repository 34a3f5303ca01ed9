//go:build !linux

package main

// setFDLimit is not offered here: -fd-limit is a usage error.
func setFDLimit(int) error { return usageError("-fd-limit works on Linux only") }
