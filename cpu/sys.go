package cpu

import (
	"runtime"
	"time"
)

// sysenv holds what a source learns from the running system rather than
// from files: the clock, the CPUs of the affinity mask, GOMAXPROCS and the
// process CPU clock. In-package tests replace the functions.
type sysenv struct {
	now        func() time.Time
	cpus       func() ([]int, error) // CPU numbers in the affinity mask
	gomaxprocs func() int
	cputime    func() (time.Duration, error) // CPU time of this process
}

func defaultEnv() sysenv {
	return sysenv{
		now:        time.Now,
		cpus:       affinityCPUs,
		gomaxprocs: func() int { return runtime.GOMAXPROCS(0) },
		cputime:    processCPUTime,
	}
}

// allowance is min(quota, CPUs in the affinity mask, GOMAXPROCS); quota 0
// means none.
func (e sysenv) allowance(quota float64) (float64, error) {
	cpus, err := e.cpus()
	if err != nil {
		return 0, err
	}
	a := float64(len(cpus))
	if g := float64(e.gomaxprocs()); g < a {
		a = g
	}
	if quota > 0 && quota < a {
		a = quota
	}
	return a, nil
}
