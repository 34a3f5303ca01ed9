//go:build !unix

package stats

// processCPUSeconds returns -1: CPU time is not read on this OS.
func processCPUSeconds() float64 { return -1 }
