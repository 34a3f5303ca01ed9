package cpu

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/sysfile/sysfiletest"
)

// hostStatFor returns a /proc/stat with a line for each of cpus, each
// busy 15 ticks (150 ms: user 10, system 5) and idle 100, and one for a
// CPU outside them, busy 1000 ticks.
func hostStatFor(cpus []int) string {
	b := new(strings.Builder)
	b.WriteString("cpu  0 0 0 0 0 0 0 0 0 0\n")
	outside := 0
	for _, c := range cpus {
		fmt.Fprintf(b, "cpu%d 10 0 5 100 1 0 0 0 0 0\n", c)
		outside = max(outside, c+1)
	}
	fmt.Fprintf(b, "cpu%d 1000 0 0 100 1 0 0 0 0 0\nintr 1 2 3\n", outside)
	return b.String()
}

// TestExportedConstructors reads the fixture trees through NewCgroupV2,
// NewCgroupV1 and NewHost, which measure this process with the real
// system's affinity mask, GOMAXPROCS and clock: each sample has the
// fixture's counters and quota, an allowance no larger than the quota,
// the CPUs of the mask and GOMAXPROCS (the number of CPUs counted, for
// the host), and the time it was read; String names what is measured.
func TestExportedConstructors(t *testing.T) {
	cpus, err := affinityCPUs()
	if err != nil {
		t.Fatal(err)
	}
	allowance := func(quota float64) float64 {
		a := min(float64(len(cpus)), float64(runtime.GOMAXPROCS(0)))
		if quota > 0 {
			a = min(a, quota)
		}
		return a
	}
	tests := []struct {
		name      string
		give      string // fixture
		edit      func(t *testing.T, root string)
		ctor      func(root string) (Source, error)
		wantUsage time.Duration
		wantQuota float64
		wantAllow float64
		wantThrot Throttling
		wantPSI   PressureLine // Pressure.Some
		wantIn    string       // in String(), after the root
	}{
		{
			name: "NewCgroupV2", give: "v2-quota", ctor: NewCgroupV2,
			wantUsage: time.Second, wantQuota: 1.5, wantAllow: allowance(1.5),
			wantThrot: Throttling{Periods: 40, Throttled: 7, ThrottledTime: 350 * time.Millisecond},
			wantPSI:   PressureLine{Avg10: 12, Avg60: 8.5, Avg300: 4.25, Total: 987654 * time.Microsecond},
			wantIn:    "cgroup v2 %s/" + v2quotaDir,
		},
		{
			name: "NewCgroupV1", give: "v1", ctor: NewCgroupV1,
			wantUsage: 6 * time.Second, wantQuota: 0.5, wantAllow: allowance(0.5),
			wantThrot: Throttling{Periods: 80, Throttled: 9, ThrottledTime: 450 * time.Millisecond},
			wantPSI:   PressureLine{Avg10: 1.5, Avg60: 2.25, Avg300: 3, Total: 123456 * time.Microsecond},
			wantIn:    "cgroup v1 %s/sys/fs/cgroup/cpuacct/docker/abc",
		},
		{
			name: "NewHost", give: "host-only", ctor: NewHost,
			edit:      func(t *testing.T, r string) { write(t, r, procStat, hostStatFor(cpus)) },
			wantUsage: time.Duration(len(cpus)) * 150 * time.Millisecond, wantAllow: float64(len(cpus)),
			wantPSI: PressureLine{Avg10: 1.5, Avg60: 2.25, Avg300: 3, Total: 123456 * time.Microsecond},
			wantIn:  "host %s/" + procStat,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixture(t, tt.give)
			if tt.edit != nil {
				tt.edit(t, root)
			}
			src, err := tt.ctor(root)
			if err != nil {
				t.Fatalf("%s(%s): %v", tt.name, tt.give, err)
			}
			s := sysfiletest.SampleNow(t, src.Sample, func(s Sample) time.Time { return s.Time })
			if s.Usage != tt.wantUsage || s.Quota != tt.wantQuota || s.Allowance != tt.wantAllow {
				t.Errorf("Sample() Usage %v, Quota %v, Allowance %v; want %v, %v, %v", s.Usage, s.Quota, s.Allowance, tt.wantUsage, tt.wantQuota, tt.wantAllow)
			}
			if s.HasThrottling != (tt.wantThrot != Throttling{}) || s.Throttling != tt.wantThrot {
				t.Errorf("Sample().Throttling = %+v (has %v), want %+v", s.Throttling, s.HasThrottling, tt.wantThrot)
			}
			if !s.HasPressure || s.Pressure.Some != tt.wantPSI {
				t.Errorf("Sample().Pressure.Some = %+v (has %v), want %+v", s.Pressure.Some, s.HasPressure, tt.wantPSI)
			}
			if got, want := src.String(), fmt.Sprintf(tt.wantIn, root); !strings.HasPrefix(got, want) || strings.Contains(got, "root cgroup") {
				t.Errorf("String() = %q, want it to begin %q and not say \"root cgroup\"", got, want)
			}
		})
	}
}

// The exported constructors take a first sample and return its error,
// which names the file that could not be read, and no source.
func TestExportedConstructorsErrors(t *testing.T) {
	sysfiletest.MissingFile(t, fixture(t, "v2-quota"), v2quotaDir+"/cpu.stat", NewCgroupV2)
	sysfiletest.MissingFile(t, fixture(t, "v1"), "sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage", NewCgroupV1)
	sysfiletest.MissingFile(t, fixture(t, "host-only"), procStat, NewHost)
}
