//go:build !linux

package main

import "errors"

// maxCPUs bounds the -cpu flag.
const maxCPUs = 1024

var errNoAffinity = errors.New("CPU pinning is only supported on Linux")

func allowedCPUs() ([]int, error) { return nil, errNoAffinity }

func pinProcess([]int) error { return errNoAffinity }
