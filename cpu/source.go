package cpu

import (
	"errors"
	"math"
	"time"
)

// Sentinel errors. Errors returned by this package wrap one of these or an
// *os.PathError, whose message names the file that could not be read.
var (
	// ErrNotMounted reports that the cgroup hierarchy a source needs is not
	// mounted (it is not listed in /proc/self/mountinfo).
	ErrNotMounted = errors.New("cpu: cgroup hierarchy not mounted")

	// ErrFormat reports a file whose content could not be parsed; the
	// message names the file and the offending text.
	ErrFormat = errors.New("cpu: unexpected file format")

	// ErrUnsupported reports a source that cannot work on this operating
	// system.
	ErrUnsupported = errors.New("cpu: unsupported on this platform")

	// ErrNoSource reports that auto-detection found no working source; it
	// wraps the error of every source tried.
	ErrNoSource = errors.New("cpu: no usable CPU source")
)

// A Source reads the cumulative CPU consumption of what it measures (a
// cgroup, this process, or the CPUs of the host) together with the CPU
// allowance of this process. Two samples give a utilisation; see
// [Utilization].
//
// The sources of this package are safe for concurrent use; their String
// method names what is measured (and why, for a detected source) so an
// operator can see it. A nil Source is a programming error: NewMonitor
// panics on it.
type Source interface {
	// Sample reads the counters now. The error names the file or call
	// that failed.
	Sample() (Sample, error)
	// String describes the source, e.g.
	// "cgroup v2 /sys/fs/cgroup/kubepods/pod1/c1".
	String() string
}

// Sample is one reading of a [Source]. Counters are cumulative since an
// arbitrary origin; only differences between two samples of the same
// source are meaningful.
//
// The zero value is an empty reading. A Sample is a plain value with no
// synchronisation of its own: safe to copy and to read concurrently, not
// to write from several goroutines at once.
type Sample struct {
	// Time is when the counters were read (it carries a monotonic clock
	// reading). A late sample is thus computed over the time that really
	// elapsed.
	Time time.Time
	// Usage is the cumulative CPU time consumed by what the source
	// measures.
	Usage time.Duration
	// Wait is the cumulative time threads of this process spent runnable
	// but waiting for a CPU (scheduler run-queue delay). Only the process
	// source reports it; it is zero for the others.
	Wait time.Duration
	// Allowance is the number of CPUs this process may use at Time: the
	// smallest of the cgroup quota (if any), the CPUs in its affinity mask
	// and GOMAXPROCS. The host source uses the number of CPUs it counts
	// instead. Re-read at every sample, so a resize is seen.
	Allowance float64
	// Quota is the cgroup CPU quota in CPUs (quota / period, the smallest
	// along the cgroup path), or 0 when there is none.
	Quota float64

	// HasThrottling reports whether Throttling was read.
	HasThrottling bool
	// Throttling holds the cgroup's CFS throttling counters.
	Throttling Throttling

	// HasPressure reports whether Pressure was read.
	HasPressure bool
	// Pressure holds CPU pressure stall information (PSI): the cgroup's
	// cpu.pressure for the cgroup v2 source, /proc/pressure/cpu (host
	// wide) for the others.
	Pressure Pressure
}

// Throttling holds cumulative CFS bandwidth counters of a cgroup
// (cpu.stat: nr_periods, nr_throttled, throttled_usec in v2 or
// throttled_time in v1). The zero value means no throttling was counted.
// It is a plain value, safe to copy and to read concurrently, as are
// Pressure and PressureLine; none of them has a lock of its own.
type Throttling struct {
	Periods       uint64        // enforcement periods elapsed
	Throttled     uint64        // periods in which the cgroup was throttled
	ThrottledTime time.Duration // total time the cgroup was throttled
}

// Pressure is CPU pressure stall information (PSI), a plain value with
// no lock, safe to read concurrently. The zero value means no stall.
type Pressure struct {
	Some PressureLine // time at least one task was waiting for a CPU
	Full PressureLine // time all non-idle tasks were waiting (cgroups only)
}

// PressureLine is one line of a PSI file, a plain value with no lock,
// safe to read concurrently. The zero value means no stall.
type PressureLine struct {
	Avg10, Avg60, Avg300 float64       // percentages averaged over 10 s, 60 s, 300 s
	Total                time.Duration // cumulative stall time
}

// Utilization returns the fraction of its allowance used between two
// samples of the same source: (Usage + Wait growth) / (elapsed time ×
// cur.Allowance), clamped to [0, 1]. The elapsed time is cur.Time −
// prev.Time, however long that was. It returns 0 when no time elapsed,
// the counters went backwards, or the allowance is not positive.
func Utilization(prev, cur Sample) float64 {
	dt := cur.Time.Sub(prev.Time)
	if dt <= 0 || cur.Allowance <= 0 {
		return 0
	}
	used := (cur.Usage - prev.Usage) + (cur.Wait - prev.Wait)
	if used <= 0 {
		return 0
	}
	u := float64(used) / (float64(dt) * cur.Allowance)
	if u > 1 || math.IsNaN(u) {
		return 1
	}
	return u
}
