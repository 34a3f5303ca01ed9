//go:build !linux

package main

import "errors"

// setFDLimit is not offered here.
func setFDLimit(int) error { return errors.New("-fd-limit works on Linux only") }
