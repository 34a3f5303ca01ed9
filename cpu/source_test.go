package cpu

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeSys is a controllable sysenv: a clock, an affinity mask, GOMAXPROCS
// and the process CPU clock.
type fakeSys struct {
	now        time.Time
	cpus       []int
	gomaxprocs int
	cputime    time.Duration
}

func (f *fakeSys) env() sysenv {
	return sysenv{
		now:        func() time.Time { return f.now },
		cpus:       func() ([]int, error) { return f.cpus, nil },
		gomaxprocs: func() int { return f.gomaxprocs },
		cputime:    func() (time.Duration, error) { return f.cputime, nil },
	}
}

func newFakeSys() *fakeSys {
	return &fakeSys{now: t0, cpus: []int{0, 1, 2, 3}, gomaxprocs: 4, cputime: time.Second}
}

// fixture copies testdata/name to a temporary directory, so a test can
// rewrite counters between samples.
func fixture(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	if err := os.CopyFS(dst, os.DirFS(filepath.Join("testdata", name))); err != nil {
		t.Fatal(err)
	}
	return dst
}

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, rel), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, root, rel string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(root, rel)); err != nil {
		t.Fatal(err)
	}
}

func v2stat(usec int) string {
	return "usage_usec " + itoa(usec) + "\nuser_usec 1\nsystem_usec 1\nnr_periods 50\nnr_throttled 8\nthrottled_usec 400000\n"
}

func itoa(n int) string { return strconv.Itoa(n) }

type constructor func(root string, env sysenv) (Source, error)

func v2ctor(root string, env sysenv) (Source, error) { return newCgroupV2(root, env) }
func v1ctor(root string, env sysenv) (Source, error) { return newCgroupV1(root, env) }
func hostCtor(root string, env sysenv) (Source, error) {
	return newHost(root, env)
}
func procCtor(root string, env sysenv) (Source, error) { return newProcess(root, env, "") }

const (
	v2quotaDir  = "sys/fs/cgroup/kubepods/pod1/c1"
	v2nestedDir = "sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/pod9.slice/cri-ctr.scope"
	hostStat2   = "cpu  0 0 0 0 0 0 0 0 0 0\n" +
		"cpu0 140 0 70 290 10 0 0 0 0 0\n" + // busy +60 (user 40, system 20)
		"cpu1 200 0 50 250 10 0 0 0 0 0\n" + // not in the mask: +100 ignored
		"cpu2 100 0 80 250 20 5 5 0 0 0\n" + // busy +40 (system 30, irq 5, softirq 5)
		"cpu3 100 0 50 250 10 0 0 0 0 0\n"
)

// TestSourcesTwoSamples reads each fixture tree twice, one second apart,
// with the usage counter advanced in between.
func TestSourcesTwoSamples(t *testing.T) {
	tests := []struct {
		name       string
		give       string // fixture
		ctor       constructor
		cpus       []int
		gomaxprocs int
		between    func(t *testing.T, root string, f *fakeSys) // advance the counters
		want       float64                                     // utilisation
		wantAllow  float64
		wantQuota  float64
		wantIn     string // in String()
		wantThrot  *Throttling
		wantPSI    *PressureLine // Some line
	}{
		{
			name: "cgroup v2 with quota", give: "v2-quota", ctor: v2ctor,
			between: func(t *testing.T, r string, _ *fakeSys) {
				write(t, r, v2quotaDir+"/cpu.stat", v2stat(1_000_000+1_200_000))
			},
			want: 0.8, wantAllow: 1.5, wantQuota: 1.5, wantIn: "cgroup v2 ",
			wantThrot: &Throttling{Periods: 50, Throttled: 8, ThrottledTime: 400 * time.Millisecond},
			wantPSI:   &PressureLine{Avg10: 12, Avg60: 8.5, Avg300: 4.25, Total: 987654 * time.Microsecond},
		},
		{
			name: "cgroup v2 without quota", give: "v2-noquota", ctor: v2ctor,
			between: func(t *testing.T, r string, _ *fakeSys) {
				write(t, r, "sys/fs/cgroup/system.slice/app.service/cpu.stat", v2stat(2_000_000+2_000_000))
			},
			want: 0.5, wantAllow: 4, wantQuota: 0, wantIn: "system.slice/app.service",
		},
		{
			name: "cgroup v2 nested, quota on the pod", give: "v2-nested", ctor: v2ctor,
			between: func(t *testing.T, r string, _ *fakeSys) {
				write(t, r, v2nestedDir+"/cpu.stat", v2stat(3_000_000+900_000))
			},
			want: 0.9, wantAllow: 1, wantQuota: 1, wantIn: "cri-ctr.scope",
		},
		{
			name: "cgroup v2 in a cgroup namespace", give: "v2-ns", ctor: v2ctor,
			between: func(t *testing.T, r string, _ *fakeSys) {
				write(t, r, "sys/fs/cgroup/cpu.stat", v2stat(4_000_000+1_000_000))
			},
			want: 0.5, wantAllow: 2, wantQuota: 2, wantIn: "cgroup v2 ",
		},
		{
			name: "cgroup v2 quota above the affinity mask", give: "v2-quota", ctor: v2ctor, cpus: []int{3},
			between: func(t *testing.T, r string, _ *fakeSys) {
				write(t, r, v2quotaDir+"/cpu.stat", v2stat(1_000_000+600_000))
			},
			want: 0.6, wantAllow: 1, wantQuota: 1.5, wantIn: "cgroup v2 ",
		},
		{
			name: "cgroup v1 separate mounts, quota 0.5", give: "v1", ctor: v1ctor,
			between: func(t *testing.T, r string, _ *fakeSys) {
				write(t, r, "sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage", "6400000000\n")
			},
			want: 0.8, wantAllow: 0.5, wantQuota: 0.5, wantIn: "cgroup v1 ",
			wantThrot: &Throttling{Periods: 80, Throttled: 9, ThrottledTime: 450 * time.Millisecond},
			wantPSI:   &PressureLine{Avg10: 1.5, Avg60: 2.25, Avg300: 3, Total: 123456 * time.Microsecond},
		},
		{
			name: "cgroup v1 combined mount, container view", give: "v1-combined", ctor: v1ctor,
			between: func(t *testing.T, r string, _ *fakeSys) {
				write(t, r, "sys/fs/cgroup/cpu,cpuacct/cpuacct.usage", "8500000000\n")
			},
			want: 0.75, wantAllow: 2, wantQuota: 2, wantIn: "cpu,cpuacct",
		},
		{
			name: "cgroup v1 GOMAXPROCS below quota", give: "v1-combined", ctor: v1ctor, gomaxprocs: 1,
			between: func(t *testing.T, r string, _ *fakeSys) {
				write(t, r, "sys/fs/cgroup/cpu,cpuacct/cpuacct.usage", "7700000000\n")
			},
			want: 0.7, wantAllow: 1, wantQuota: 2, wantIn: "cgroup v1 ",
		},
		{
			name: "host, CPUs of the mask only", give: "host-only", ctor: hostCtor, cpus: []int{0, 2},
			between: func(t *testing.T, r string, _ *fakeSys) { write(t, r, "proc/stat", hostStat2) },
			want:    0.5, wantAllow: 2, wantIn: "host ",
		},
		{
			name: "process CPU time and run-queue wait", give: "host-only", ctor: procCtor, gomaxprocs: 2,
			between: func(t *testing.T, r string, f *fakeSys) {
				f.cputime += 600 * time.Millisecond
				write(t, r, "proc/self/task/100/schedstat", "9000000 101000000 30\n") // +100 ms wait
				remove(t, r, "proc/self/task/101")                                    // exited
				if err := os.MkdirAll(filepath.Join(r, "proc/self/task/102"), 0o755); err != nil {
					t.Fatal(err)
				}
				write(t, r, "proc/self/task/102/schedstat", "1000 100000000 1\n") // new: 100 ms wait
			},
			want: 0.4, wantAllow: 2, wantIn: "process ",
		},
		{
			name: "process in a v1 container uses its quota", give: "v1", ctor: procCtor,
			between: func(t *testing.T, r string, f *fakeSys) { f.cputime += 400 * time.Millisecond },
			want:    0.8, wantAllow: 0.5, wantQuota: 0.5, wantIn: "process ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixture(t, tt.give)
			f := newFakeSys()
			if tt.cpus != nil {
				f.cpus = tt.cpus
			}
			if tt.gomaxprocs != 0 {
				f.gomaxprocs = tt.gomaxprocs
			}
			src, err := tt.ctor(root, f.env())
			if err != nil {
				t.Fatalf("new source on %s: %v", tt.give, err)
			}
			s1, err := src.Sample()
			if err != nil {
				t.Fatalf("Sample() #1: %v", err)
			}
			tt.between(t, root, f)
			f.now = f.now.Add(time.Second)
			s2, err := src.Sample()
			if err != nil {
				t.Fatalf("Sample() #2: %v", err)
			}
			if got := Utilization(s1, s2); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Utilization(s1, s2) = %v, want %v", got, tt.want)
			}
			if s2.Allowance != tt.wantAllow {
				t.Errorf("Sample().Allowance = %v, want %v", s2.Allowance, tt.wantAllow)
			}
			if s2.Quota != tt.wantQuota {
				t.Errorf("Sample().Quota = %v, want %v", s2.Quota, tt.wantQuota)
			}
			if !s2.Time.Equal(t0.Add(time.Second)) {
				t.Errorf("Sample().Time = %v, want %v", s2.Time, t0.Add(time.Second))
			}
			if got := src.String(); !strings.Contains(got, tt.wantIn) || strings.Contains(got, "root cgroup") {
				t.Errorf("String() = %q, want it to contain %q and not \"root cgroup\"", got, tt.wantIn)
			}
			if tt.wantThrot != nil && (!s2.HasThrottling || s2.Throttling != *tt.wantThrot) {
				t.Errorf("Sample().Throttling = %+v (has %v), want %+v", s2.Throttling, s2.HasThrottling, *tt.wantThrot)
			}
			if tt.wantPSI != nil && (!s2.HasPressure || s2.Pressure.Some != *tt.wantPSI) {
				t.Errorf("Sample().Pressure.Some = %+v (has %v), want %+v", s2.Pressure.Some, s2.HasPressure, *tt.wantPSI)
			}
		})
	}
}

// TestQuotaChangeBetweenSamples resizes the quota in place between two
// samples; the second sample must use the new allowance.
func TestQuotaChangeBetweenSamples(t *testing.T) {
	tests := []struct {
		name      string
		give      string
		ctor      constructor
		resize    map[string]string // file → new content
		usage     [2]string         // usage file, new content
		want      float64
		wantAllow float64
	}{
		{
			name: "cgroup v2 leaf 1.5 → 1 CPU", give: "v2-quota", ctor: v2ctor,
			resize:    map[string]string{v2quotaDir + "/cpu.max": "100000 100000\n"},
			usage:     [2]string{v2quotaDir + "/cpu.stat", v2stat(1_000_000 + 900_000)},
			want:      0.9,
			wantAllow: 1,
		},
		{
			name: "cgroup v2 quota added on the parent", give: "v2-noquota", ctor: v2ctor,
			resize:    map[string]string{"sys/fs/cgroup/system.slice/cpu.max": "50000 100000\n"},
			usage:     [2]string{"sys/fs/cgroup/system.slice/app.service/cpu.stat", v2stat(2_000_000 + 250_000)},
			want:      0.5,
			wantAllow: 0.5,
		},
		{
			name: "cgroup v1 0.5 → 3 CPUs", give: "v1", ctor: v1ctor,
			resize:    map[string]string{"sys/fs/cgroup/cpu/docker/abc/cpu.cfs_quota_us": "300000\n"},
			usage:     [2]string{"sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage", "7500000000\n"},
			want:      0.5,
			wantAllow: 3,
		},
		{
			name: "cgroup v1 period change", give: "v1", ctor: v1ctor,
			resize:    map[string]string{"sys/fs/cgroup/cpu/docker/abc/cpu.cfs_period_us": "25000\n"},
			usage:     [2]string{"sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage", "7000000000\n"},
			want:      0.5,
			wantAllow: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixture(t, tt.give)
			f := newFakeSys()
			src, err := tt.ctor(root, f.env())
			if err != nil {
				t.Fatal(err)
			}
			s1, err := src.Sample()
			if err != nil {
				t.Fatal(err)
			}
			for file, content := range tt.resize {
				write(t, root, file, content)
			}
			write(t, root, tt.usage[0], tt.usage[1])
			f.now = f.now.Add(time.Second)
			s2, err := src.Sample()
			if err != nil {
				t.Fatal(err)
			}
			if s2.Allowance != tt.wantAllow {
				t.Errorf("after resize Sample().Allowance = %v, want %v (before: %v)", s2.Allowance, tt.wantAllow, s1.Allowance)
			}
			if got := Utilization(s1, s2); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Utilization(s1, s2) = %v, want %v", got, tt.want)
			}
		})
	}
}

// hostTwoSamples samples the host source on /proc/stat stat0 with the
// mask cpus0, then one second later on stat1 with the mask cpus1.
func hostTwoSamples(t *testing.T, cpus0 []int, stat0 string, cpus1 []int, stat1 string) (prev, cur Sample) {
	t.Helper()
	root := fixture(t, "host-only")
	f := newFakeSys()
	f.cpus = cpus0
	write(t, root, procStat, stat0)
	src, err := newHost(root, f.env())
	if err != nil {
		t.Fatal(err)
	}
	if prev, err = src.Sample(); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(time.Second)
	f.cpus = cpus1
	write(t, root, procStat, stat1)
	if cur, err = src.Sample(); err != nil {
		t.Fatal(err)
	}
	return prev, cur
}

// TestHostCPUJoiningMaskIsNotBusy: the host source counts the growth of
// each CPU's busy time over the CPUs in the affinity mask at both
// samples. Before, it summed the busy time of the CPUs in the mask: when
// a CPU joined the mask (taskset, a cpuset resize by a CPU manager) or
// came back online, the next sample's sum took that CPU's busy time since
// boot, and the utilisation over that interval read 1 on idle CPUs: a
// false saturation, held for the cooldown.
func TestHostCPUJoiningMaskIsNotBusy(t *testing.T) {
	// One idle second later, CPU 2 joins the mask; no CPU did any work.
	prev, cur := hostTwoSamples(t,
		[]int{0, 1}, "cpu  0 0 0 0 0 0 0 0 0 0\n"+
			"cpu0 100 0 50 1000 10 0 0 0 0 0\n"+
			"cpu1 100 0 50 1000 10 0 0 0 0 0\n"+
			"cpu2 900000 0 90000 1000 10 0 0 0 0 0\n"+ // busy for days, not ours yet
			"cpu3 100 0 50 1000 10 0 0 0 0 0\n",
		[]int{0, 1, 2}, "cpu  0 0 0 0 0 0 0 0 0 0\n"+
			"cpu0 100 0 50 1100 10 0 0 0 0 0\n"+
			"cpu1 100 0 50 1100 10 0 0 0 0 0\n"+
			"cpu2 900000 0 90000 1100 10 0 0 0 0 0\n"+
			"cpu3 100 0 50 1100 10 0 0 0 0 0\n")
	if u := Utilization(prev, cur); u > 0.1 {
		t.Errorf("Utilization over an idle second in which CPU 2 joined the mask = %v, want 0", u)
	}
}

// TestHostCPULeavingMaskCountsTheOthers: when a CPU leaves the mask, the
// interval counts what the CPUs still in it did. Before, the sum lost
// the leaving CPU's busy time since boot, went back, and the interval
// read 0 on CPUs fully busy.
func TestHostCPULeavingMaskCountsTheOthers(t *testing.T) {
	// One second later, CPU 2 has left the mask; CPUs 0 and 1 were busy
	// all that second (100 ticks each).
	prev, cur := hostTwoSamples(t,
		[]int{0, 1, 2}, "cpu  0 0 0 0 0 0 0 0 0 0\n"+
			"cpu0 100 0 50 1000 10 0 0 0 0 0\n"+
			"cpu1 100 0 50 1000 10 0 0 0 0 0\n"+
			"cpu2 900000 0 90000 1000 10 0 0 0 0 0\n",
		[]int{0, 1}, "cpu  0 0 0 0 0 0 0 0 0 0\n"+
			"cpu0 200 0 50 1000 10 0 0 0 0 0\n"+
			"cpu1 150 0 100 1000 10 0 0 0 0 0\n"+
			"cpu2 900000 0 90000 1100 10 0 0 0 0 0\n")
	if u := Utilization(prev, cur); u != 1 || cur.Allowance != 2 {
		t.Errorf("Utilization over a second in which CPUs 0 and 1 were busy and CPU 2 left the mask = %v (allowance %v), want 1 (2)", u, cur.Allowance)
	}
}

// TestHostConcurrentSamples: the host source keeps its per-CPU counters
// between samples under its lock: samples taken from several goroutines
// at once (a Monitor's sampler and a caller of its own) do not race
// (run with -race).
func TestHostConcurrentSamples(t *testing.T) {
	root := fixture(t, "host-only")
	src, err := newHost(root, newFakeSys().env())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				if _, err := src.Sample(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestLateSample: a sample taken 3 s after the previous one is computed
// over 3 s, not over a nominal interval.
func TestLateSample(t *testing.T) {
	root := fixture(t, "v2-quota")
	f := newFakeSys()
	src, err := newCgroupV2(root, f.env())
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := src.Sample()
	write(t, root, v2quotaDir+"/cpu.stat", v2stat(1_000_000+3_600_000)) // 3.6 CPU-seconds
	f.now = f.now.Add(3 * time.Second)
	s2, _ := src.Sample()
	if got, want := Utilization(s1, s2), 0.8; math.Abs(got-want) > 1e-9 {
		t.Errorf("Utilization over 3 s = %v, want %v", got, want)
	}
}

func TestUtilization(t *testing.T) {
	base := Sample{Time: t0, Usage: time.Second, Wait: time.Second, Allowance: 2}
	at := func(d time.Duration, usage, wait time.Duration, allow float64) Sample {
		return Sample{Time: t0.Add(d), Usage: usage, Wait: wait, Allowance: allow}
	}
	tests := []struct {
		name string
		give Sample
		want float64
	}{
		{"half of two CPUs", at(time.Second, 2*time.Second, time.Second, 2), 0.5},
		{"wait counts", at(time.Second, 2*time.Second, 2*time.Second, 2), 1},
		{"clamped to 1", at(time.Second, 4*time.Second, time.Second, 2), 1},
		{"no time elapsed", at(0, 2*time.Second, time.Second, 2), 0},
		{"time went back", at(-time.Second, 2*time.Second, time.Second, 2), 0},
		{"counter went back", at(time.Second, 0, time.Second, 2), 0},
		{"zero allowance", at(time.Second, 2*time.Second, time.Second, 0), 0},
		{"fractional allowance", at(time.Second, 1250*time.Millisecond, time.Second, 0.5), 0.5},
	}
	for _, tt := range tests {
		if got := Utilization(base, tt.give); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: Utilization(base, %+v) = %v, want %v", tt.name, tt.give, got, tt.want)
		}
	}
}

// TestSourceErrors: a missing, unreadable or malformed file gives an
// error naming that file.
func TestSourceErrors(t *testing.T) {
	tests := []struct {
		name     string
		give     string
		ctor     constructor
		breakIt  func(t *testing.T, root string)
		wantFile string // relative to the root
		wantIs   error
	}{
		{
			name: "v2 cpu.stat missing", give: "v2-quota", ctor: v2ctor,
			breakIt:  func(t *testing.T, r string) { remove(t, r, v2quotaDir+"/cpu.stat") },
			wantFile: v2quotaDir + "/cpu.stat", wantIs: fs.ErrNotExist,
		},
		{
			name: "v2 cpu.stat unreadable (a directory)", give: "v2-quota", ctor: v2ctor,
			breakIt: func(t *testing.T, r string) {
				remove(t, r, v2quotaDir+"/cpu.stat")
				if err := os.Mkdir(filepath.Join(r, v2quotaDir, "cpu.stat"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantFile: v2quotaDir + "/cpu.stat",
		},
		{
			name: "v2 cpu.stat without usage_usec", give: "v2-quota", ctor: v2ctor,
			breakIt:  func(t *testing.T, r string) { write(t, r, v2quotaDir+"/cpu.stat", "nr_periods 1\n") },
			wantFile: v2quotaDir + "/cpu.stat", wantIs: ErrFormat,
		},
		{
			name: "v2 cpu.max malformed on the parent", give: "v2-quota", ctor: v2ctor,
			breakIt:  func(t *testing.T, r string) { write(t, r, "sys/fs/cgroup/kubepods/pod1/cpu.max", "lots\n") },
			wantFile: "sys/fs/cgroup/kubepods/pod1/cpu.max", wantIs: ErrFormat,
		},
		{
			name: "v2 mountinfo missing", give: "v2-quota", ctor: v2ctor,
			breakIt:  func(t *testing.T, r string) { remove(t, r, procMountinfo) },
			wantFile: procMountinfo, wantIs: fs.ErrNotExist,
		},
		{
			name: "v2 not mounted", give: "v1-combined", ctor: v2ctor,
			breakIt:  func(t *testing.T, r string) {},
			wantFile: procMountinfo, wantIs: ErrNotMounted,
		},
		{
			name: "v1 cpuacct.usage missing", give: "v1", ctor: v1ctor,
			breakIt:  func(t *testing.T, r string) { remove(t, r, "sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage") },
			wantFile: "sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage", wantIs: fs.ErrNotExist,
		},
		{
			name: "v1 cpuacct.usage garbage", give: "v1", ctor: v1ctor,
			breakIt:  func(t *testing.T, r string) { write(t, r, "sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage", "x1\n") },
			wantFile: "sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage", wantIs: ErrFormat,
		},
		{
			name: "v1 cfs_period_us missing", give: "v1", ctor: v1ctor,
			breakIt:  func(t *testing.T, r string) { remove(t, r, "sys/fs/cgroup/cpu/docker/abc/cpu.cfs_period_us") },
			wantFile: "sys/fs/cgroup/cpu/docker/abc/cpu.cfs_period_us", wantIs: fs.ErrNotExist,
		},
		{
			name: "v1 /proc/self/cgroup missing", give: "v1", ctor: v1ctor,
			breakIt:  func(t *testing.T, r string) { remove(t, r, procCgroup) },
			wantFile: procCgroup, wantIs: fs.ErrNotExist,
		},
		{
			name: "host /proc/stat missing", give: "host-only", ctor: hostCtor,
			breakIt:  func(t *testing.T, r string) { remove(t, r, procStat) },
			wantFile: procStat, wantIs: fs.ErrNotExist,
		},
		{
			name: "process task directory missing", give: "host-only", ctor: procCtor,
			breakIt:  func(t *testing.T, r string) { remove(t, r, procTasks) },
			wantFile: procTasks, wantIs: fs.ErrNotExist,
		},
		{
			name: "process schedstat garbage", give: "host-only", ctor: procCtor,
			breakIt:  func(t *testing.T, r string) { write(t, r, procTasks+"/100/schedstat", "one\n") },
			wantFile: procTasks + "/100/schedstat", wantIs: ErrFormat,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixture(t, tt.give)
			tt.breakIt(t, root)
			_, err := tt.ctor(root, newFakeSys().env())
			if err == nil {
				t.Fatalf("new source = nil error, want one naming %s", tt.wantFile)
			}
			if want := filepath.Join(root, tt.wantFile); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %s", err, want)
			}
			if !strings.HasPrefix(err.Error(), "cpu: ") {
				t.Errorf("error %q lacks the \"cpu: \" prefix", err)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("errors.Is(%q, %v) = false, want true", err, tt.wantIs)
			}
		})
	}
}

// TestSampleErrorAfterStart: a file that disappears after construction
// makes Sample fail with its name instead of returning stale numbers.
func TestSampleErrorAfterStart(t *testing.T) {
	root := fixture(t, "v1")
	src, err := newCgroupV1(root, newFakeSys().env())
	if err != nil {
		t.Fatal(err)
	}
	remove(t, root, "sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage")
	_, err = src.Sample()
	if err == nil || !strings.Contains(err.Error(), "cpuacct.usage") {
		t.Errorf("Sample() after removing cpuacct.usage = %v, want an error naming it", err)
	}
}
