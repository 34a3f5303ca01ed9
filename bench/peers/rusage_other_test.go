//go:build !unix

package main

import "time"

// processCPUSelf reports no CPU time where there is no getrusage.
func processCPUSelf() (time.Duration, bool) { return 0, false }
