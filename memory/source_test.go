package memory

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const MiB = 1 << 20

// fakeSys is a controllable sysenv: a clock and the runtime's readings.
type fakeSys struct {
	now time.Time
	rt  Runtime
}

func (f *fakeSys) env() sysenv {
	return sysenv{
		now:     func() time.Time { return f.now },
		runtime: func() Runtime { return f.rt },
	}
}

func newFakeSys() *fakeSys {
	return &fakeSys{now: t0, rt: Runtime{HeapLive: 50 * MiB, HeapGoal: 100 * MiB, Total: 120 * MiB, GOMAXPROCS: 2}}
}

// fixture copies testdata/name to a temporary directory, so a test can
// rewrite files between samples.
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

type constructor func(root string, env sysenv) (Source, error)

func v2ctor(root string, env sysenv) (Source, error) { return newCgroupV2(root, env) }
func v1ctor(root string, env sysenv) (Source, error) { return newCgroupV1(root, env) }

const (
	v2dir = "sys/fs/cgroup/kubepods/pod1/c1"
	v1dir = "sys/fs/cgroup/memory/docker/abc"
)

// TestSources reads each fixture tree and checks every field of the
// sample and the fraction made of it.
func TestSources(t *testing.T) {
	tests := []struct {
		name     string
		give     string // fixture
		ctor     constructor
		rt       Runtime // the runtime's readings
		edit     func(t *testing.T, root string)
		want     Cgroup
		wantKind Kind
		wantUtil float64
		wantLim  uint64
		wantIn   string // in String()
	}{
		{
			name: "v2: limit on the pod, smaller than the container's", give: "v2", ctor: v2ctor,
			want: Cgroup{Usage: 600 * MiB, InactiveFile: 100 * MiB, Max: 1000 * MiB,
				Events: Events{High: 3, Max: 2, OOM: 1, OOMKill: 1}},
			wantKind: KindCgroupV2, wantUtil: 0.5, wantLim: 1000 * MiB, wantIn: "cgroup v2 ",
		},
		{
			name: "v2: memory.high below memory.max counts", give: "v2", ctor: v2ctor,
			edit: func(t *testing.T, r string) { write(t, r, v2dir+"/memory.high", "800000000\n") },
			want: Cgroup{Usage: 600 * MiB, InactiveFile: 100 * MiB, Max: 1000 * MiB, High: 800000000,
				Events: Events{High: 3, Max: 2, OOM: 1, OOMKill: 1}},
			wantKind: KindCgroupV2, wantUtil: 500 * MiB / 800000000.0, wantLim: 800000000,
		},
		{
			name: "v2: GOMEMLIMIT fuller than the cgroup", give: "v2", ctor: v2ctor,
			rt: Runtime{Total: 450 * MiB, Limit: 500 * MiB},
			want: Cgroup{Usage: 600 * MiB, InactiveFile: 100 * MiB, Max: 1000 * MiB,
				Events: Events{High: 3, Max: 2, OOM: 1, OOMKill: 1}},
			wantKind: KindCgroupV2, wantUtil: 0.9, wantLim: 500 * MiB,
		},
		{
			name: "v2: no memory.events", give: "v2", ctor: v2ctor,
			edit:     func(t *testing.T, r string) { remove(t, r, v2dir+"/memory.events") },
			want:     Cgroup{Usage: 600 * MiB, InactiveFile: 100 * MiB, Max: 1000 * MiB},
			wantKind: KindCgroupV2, wantUtil: 0.5, wantLim: 1000 * MiB,
		},
		{
			name: "v2 without a limit", give: "v2-nolimit", ctor: v2ctor,
			want:     Cgroup{Usage: 300 * MiB, InactiveFile: 50 * MiB},
			wantKind: KindCgroupV2, wantUtil: 0, wantLim: 0, wantIn: "app.service",
		},
		{
			name: "v2 without a limit, GOMEMLIMIT set", give: "v2-nolimit", ctor: v2ctor,
			rt:       Runtime{Total: 100 * MiB, Limit: 400 * MiB},
			want:     Cgroup{Usage: 300 * MiB, InactiveFile: 50 * MiB},
			wantKind: KindCgroupV2, wantUtil: 0.25, wantLim: 400 * MiB,
		},
		{
			name: "v2 in a cgroup namespace", give: "v2-ns", ctor: v2ctor,
			want:     Cgroup{Usage: 250 * MiB, InactiveFile: 50 * MiB, Max: 512 * MiB, High: 400 * MiB, Events: Events{High: 12}},
			wantKind: KindCgroupV2, wantUtil: 0.5, wantLim: 400 * MiB,
		},
		{
			name: "v1: hierarchical_memory_limit and the container's agree", give: "v1", ctor: v1ctor,
			want:     Cgroup{Usage: 300 * MiB, InactiveFile: 50 * MiB, Max: 500 * MiB, Events: Events{Max: 7, OOMKill: 2}},
			wantKind: KindCgroupV1, wantUtil: 0.5, wantLim: 500 * MiB, wantIn: "cgroup v1 ",
		},
		{
			name: "v1: a smaller limit on an ancestor not mounted", give: "v1", ctor: v1ctor,
			edit: func(t *testing.T, r string) {
				write(t, r, v1dir+"/memory.stat", "total_inactive_file 52428800\nhierarchical_memory_limit 419430400\n")
			},
			want:     Cgroup{Usage: 300 * MiB, InactiveFile: 50 * MiB, Max: 400 * MiB, Events: Events{Max: 7, OOMKill: 2}},
			wantKind: KindCgroupV1, wantUtil: 0.625, wantLim: 400 * MiB,
		},
		{
			name: "v1: without total_inactive_file, inactive_file", give: "v1", ctor: v1ctor,
			edit:     func(t *testing.T, r string) { write(t, r, v1dir+"/memory.stat", "inactive_file 104857600\n") },
			want:     Cgroup{Usage: 300 * MiB, InactiveFile: 100 * MiB, Max: 500 * MiB, Events: Events{Max: 7, OOMKill: 2}},
			wantKind: KindCgroupV1, wantUtil: 0.4, wantLim: 500 * MiB,
		},
		{
			name: "v1: no failcnt, no oom_control", give: "v1", ctor: v1ctor,
			edit: func(t *testing.T, r string) {
				remove(t, r, v1dir+"/memory.failcnt")
				remove(t, r, v1dir+"/memory.oom_control")
			},
			want:     Cgroup{Usage: 300 * MiB, InactiveFile: 50 * MiB, Max: 500 * MiB},
			wantKind: KindCgroupV1, wantUtil: 0.5, wantLim: 500 * MiB,
		},
		{
			name: "v1 container view (mount root is the cgroup)", give: "v1-container", ctor: v1ctor,
			want:     Cgroup{Usage: 100 * MiB, InactiveFile: 20 * MiB, Max: 320 * MiB},
			wantKind: KindCgroupV1, wantUtil: 0.25, wantLim: 320 * MiB, wantIn: "sys/fs/cgroup/memory",
		},
		{
			name: "v1 unlimited (page-aligned max)", give: "v1-unlimited", ctor: v1ctor,
			want:     Cgroup{Usage: 4 * MiB, InactiveFile: 1 * MiB},
			wantKind: KindCgroupV1, wantUtil: 0, wantLim: 0, wantIn: "process_api/x1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixture(t, tt.give)
			if tt.edit != nil {
				tt.edit(t, root)
			}
			f := newFakeSys()
			if tt.rt != (Runtime{}) {
				f.rt = tt.rt
			}
			src, err := tt.ctor(root, f.env())
			if err != nil {
				t.Fatalf("new source on %s: %v", tt.give, err)
			}
			f.now = t0.Add(time.Second)
			s, err := src.Sample()
			if err != nil {
				t.Fatalf("Sample(): %v", err)
			}
			if s.Cgroup != tt.want {
				t.Errorf("Sample().Cgroup = %+v, want %+v", s.Cgroup, tt.want)
			}
			if s.Kind != tt.wantKind {
				t.Errorf("Sample().Kind = %v, want %v", s.Kind, tt.wantKind)
			}
			if s.Runtime != f.rt {
				t.Errorf("Sample().Runtime = %+v, want %+v", s.Runtime, f.rt)
			}
			if !s.Time.Equal(t0.Add(time.Second)) {
				t.Errorf("Sample().Time = %v, want %v", s.Time, t0.Add(time.Second))
			}
			if got := s.Utilization(); math.Abs(got-tt.wantUtil) > 1e-9 {
				t.Errorf("Sample().Utilization() = %v, want %v", got, tt.wantUtil)
			}
			if got := s.Limit(); got != tt.wantLim {
				t.Errorf("Sample().Limit() = %d, want %d", got, tt.wantLim)
			}
			if got := s.Limited(); got != (tt.wantLim != 0) {
				t.Errorf("Sample().Limited() = %v, want %v", got, tt.wantLim != 0)
			}
			if got := src.String(); !strings.Contains(got, tt.wantIn) || strings.Contains(got, "root cgroup") {
				t.Errorf("String() = %q, want it to contain %q and not \"root cgroup\"", got, tt.wantIn)
			}
		})
	}
}

// TestResizeBetweenSamples changes the limits in place; the next sample
// sees them.
func TestResizeBetweenSamples(t *testing.T) {
	tests := []struct {
		name     string
		give     string
		ctor     constructor
		resize   map[string]string
		wantLim  uint64
		wantUtil float64
	}{
		{
			name: "v2 pod limit raised, container's now the smallest", give: "v2", ctor: v2ctor,
			resize:  map[string]string{"sys/fs/cgroup/kubepods/pod1/memory.max": "max\n", v2dir + "/memory.max": "1048576000\n"},
			wantLim: 1000 * MiB, wantUtil: 0.5,
		},
		{
			name: "v2 limit lowered below usage", give: "v2", ctor: v2ctor,
			resize:  map[string]string{v2dir + "/memory.max": "262144000\n"},
			wantLim: 250 * MiB, wantUtil: 1,
		},
		{
			name: "v2 limit added to an unlimited cgroup", give: "v2-nolimit", ctor: v2ctor,
			resize:  map[string]string{"sys/fs/cgroup/system.slice/memory.max": "1048576000\n"},
			wantLim: 1000 * MiB, wantUtil: 0.25,
		},
		{
			name: "v1 limit removed", give: "v1", ctor: v1ctor,
			resize: map[string]string{
				v1dir + "/memory.limit_in_bytes": "9223372036854771712\n",
				v1dir + "/memory.stat":           "total_inactive_file 52428800\nhierarchical_memory_limit 9223372036854771712\n",
			},
			wantLim: 0, wantUtil: 0,
		},
		{
			name: "v1 limit -1", give: "v1", ctor: v1ctor,
			resize: map[string]string{
				v1dir + "/memory.limit_in_bytes": "-1\n",
				v1dir + "/memory.stat":           "total_inactive_file 52428800\n",
			},
			wantLim: 0, wantUtil: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixture(t, tt.give)
			src, err := tt.ctor(root, newFakeSys().env())
			if err != nil {
				t.Fatal(err)
			}
			for file, content := range tt.resize {
				write(t, root, file, content)
			}
			s, err := src.Sample()
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Limit(); got != tt.wantLim {
				t.Errorf("after resize Sample().Limit() = %d, want %d", got, tt.wantLim)
			}
			if got := s.Utilization(); math.Abs(got-tt.wantUtil) > 1e-9 {
				t.Errorf("after resize Sample().Utilization() = %v, want %v", got, tt.wantUtil)
			}
		})
	}
}

func TestSampleUtilization(t *testing.T) {
	tests := []struct {
		name string
		give Sample
		want float64
	}{
		{"no limit at all", Sample{Runtime: Runtime{Total: 100}, Cgroup: Cgroup{Usage: 100}}, 0},
		{"cgroup only", Sample{Cgroup: Cgroup{Usage: 80, InactiveFile: 20, Max: 100}}, 0.6},
		{"GOMEMLIMIT only", Sample{Runtime: Runtime{Total: 30, Limit: 120}}, 0.25},
		{"both, cgroup fuller", Sample{Runtime: Runtime{Total: 30, Limit: 120}, Cgroup: Cgroup{Usage: 70, Max: 100}}, 0.7},
		{"both, runtime fuller", Sample{Runtime: Runtime{Total: 90, Limit: 100}, Cgroup: Cgroup{Usage: 70, Max: 200}}, 0.9},
		{"high below max", Sample{Cgroup: Cgroup{Usage: 60, Max: 100, High: 80}}, 0.75},
		{"over the limit: clamped", Sample{Cgroup: Cgroup{Usage: 300, Max: 100}}, 1},
		{"inactive file above usage", Sample{Cgroup: Cgroup{Usage: 10, InactiveFile: 20, Max: 100}}, 0},
	}
	for _, tt := range tests {
		if got := tt.give.Utilization(); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("%s: %+v.Utilization() = %v, want %v", tt.name, tt.give, got, tt.want)
		}
	}
}

// TestSampleProjected: the runtime's plan against each limit — the next
// GC's heap against the cgroup's, the live heap against GOMEMLIMIT —
// plus what is mapped besides the heap and, for the cgroup, what the
// runtime did not map.
func TestSampleProjected(t *testing.T) {
	// 40 live, goal 80, 100 mapped of which 90 heap: 10 besides the heap.
	rt := Runtime{HeapLive: 40, HeapGoal: 80, Total: 100, HeapMapped: 90}
	withLimit := func(r Runtime, l uint64) Runtime { r.Limit = l; return r }
	tests := []struct {
		name string
		give Sample
		want float64
	}{
		{"no limit", Sample{Runtime: rt, Cgroup: Cgroup{Usage: 100}}, 0},
		{"cgroup: goal plus non-heap", Sample{Runtime: rt, Cgroup: Cgroup{Usage: 100, Max: 200}}, 0.45},
		{"cgroup: memory the runtime did not map counts", Sample{Runtime: rt, Cgroup: Cgroup{Usage: 140, InactiveFile: 10, Max: 200}}, 0.6},
		{"cgroup: freed but retained memory does not", Sample{Runtime: Runtime{HeapLive: 10, HeapGoal: 20, Total: 100, HeapMapped: 90}, Cgroup: Cgroup{Usage: 100, Max: 200}}, 0.15},
		{"GOMEMLIMIT: live plus non-heap", Sample{Runtime: withLimit(rt, 100)}, 0.5},
		{"both: the fuller", Sample{Runtime: withLimit(rt, 60), Cgroup: Cgroup{Usage: 100, Max: 400}}, 50.0 / 60},
		// A soft limit under the cgroup's: the runtime collects to stay
		// under it, so the cgroup sees the live heap, not the goal.
		{"soft limit under the cgroup's: live heap", Sample{Runtime: withLimit(rt, 180), Cgroup: Cgroup{Usage: 100, Max: 200}}, 50.0 / 180}, // the cgroup sees 50/200; the soft limit 50/180
		{"soft limit above the cgroup's: goal", Sample{Runtime: withLimit(rt, 300), Cgroup: Cgroup{Usage: 100, Max: 200}}, 0.45},
		{"over: clamped", Sample{Runtime: rt, Cgroup: Cgroup{Usage: 100, Max: 50}}, 1},
		{"no heap classes: Total counts whole", Sample{Runtime: Runtime{Total: 30, Limit: 120}}, 0.25},
	}
	for _, tt := range tests {
		if got := tt.give.Projected(); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("%s: %+v.Projected() = %v, want %v", tt.name, tt.give, got, tt.want)
		}
	}
}

func TestGCFraction(t *testing.T) {
	at := func(gc, total time.Duration) Sample { return Sample{Runtime: Runtime{GCCPU: gc, TotalCPU: total}} }
	tests := []struct {
		name      string
		prev, cur Sample
		want      float64
	}{
		{"a quarter", at(time.Second, 4*time.Second), at(2*time.Second, 8*time.Second), 0.25},
		{"no cycle ended", at(time.Second, 4*time.Second), at(time.Second, 4*time.Second), 0},
		{"counters went back", at(2*time.Second, 8*time.Second), at(time.Second, 4*time.Second), 0},
		{"clamped", at(0, 4*time.Second), at(9*time.Second, 8*time.Second), 1},
	}
	for _, tt := range tests {
		if got := GCFraction(tt.prev, tt.cur); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("%s: GCFraction(%+v, %+v) = %v, want %v", tt.name, tt.prev.Runtime, tt.cur.Runtime, got, tt.want)
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
			name: "v2 memory.current missing", give: "v2", ctor: v2ctor,
			breakIt:  func(t *testing.T, r string) { remove(t, r, v2dir+"/memory.current") },
			wantFile: v2dir + "/memory.current", wantIs: fs.ErrNotExist,
		},
		{
			name: "v2 memory.current garbage", give: "v2", ctor: v2ctor,
			breakIt:  func(t *testing.T, r string) { write(t, r, v2dir+"/memory.current", "lots\n") },
			wantFile: v2dir + "/memory.current", wantIs: ErrFormat,
		},
		{
			name: "v2 memory.max garbage on the parent", give: "v2", ctor: v2ctor,
			breakIt:  func(t *testing.T, r string) { write(t, r, "sys/fs/cgroup/kubepods/pod1/memory.max", "1G\n") },
			wantFile: "sys/fs/cgroup/kubepods/pod1/memory.max", wantIs: ErrFormat,
		},
		{
			name: "v2 memory.stat missing", give: "v2", ctor: v2ctor,
			breakIt:  func(t *testing.T, r string) { remove(t, r, v2dir+"/memory.stat") },
			wantFile: v2dir + "/memory.stat", wantIs: fs.ErrNotExist,
		},
		{
			name: "v2 memory.events garbage", give: "v2", ctor: v2ctor,
			breakIt:  func(t *testing.T, r string) { write(t, r, v2dir+"/memory.events", "oom many\n") },
			wantFile: v2dir + "/memory.events", wantIs: ErrFormat,
		},
		{
			name: "v2 mountinfo missing", give: "v2", ctor: v2ctor,
			breakIt:  func(t *testing.T, r string) { remove(t, r, procMountinfo) },
			wantFile: procMountinfo, wantIs: fs.ErrNotExist,
		},
		{
			name: "v2 not mounted", give: "v1-container", ctor: v2ctor,
			breakIt:  func(t *testing.T, r string) {},
			wantFile: procMountinfo, wantIs: ErrNotMounted,
		},
		{
			name: "v1 usage_in_bytes missing", give: "v1", ctor: v1ctor,
			breakIt:  func(t *testing.T, r string) { remove(t, r, v1dir+"/memory.usage_in_bytes") },
			wantFile: v1dir + "/memory.usage_in_bytes", wantIs: fs.ErrNotExist,
		},
		{
			name: "v1 limit_in_bytes garbage", give: "v1", ctor: v1ctor,
			breakIt:  func(t *testing.T, r string) { write(t, r, v1dir+"/memory.limit_in_bytes", "x1\n") },
			wantFile: v1dir + "/memory.limit_in_bytes", wantIs: ErrFormat,
		},
		{
			name: "v1 memory.stat garbage", give: "v1", ctor: v1ctor,
			breakIt:  func(t *testing.T, r string) { write(t, r, v1dir+"/memory.stat", "total_inactive_file -3\n") },
			wantFile: v1dir + "/memory.stat", wantIs: ErrFormat,
		},
		{
			name: "v1 /proc/self/cgroup missing", give: "v1", ctor: v1ctor,
			breakIt:  func(t *testing.T, r string) { remove(t, r, procCgroup) },
			wantFile: procCgroup, wantIs: fs.ErrNotExist,
		},
		{
			name: "v1 no memory controller", give: "none", ctor: v1ctor,
			breakIt:  func(t *testing.T, r string) {},
			wantFile: procMountinfo, wantIs: ErrNotMounted,
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
			if !strings.HasPrefix(err.Error(), "memory: ") {
				t.Errorf("error %q lacks the \"memory: \" prefix", err)
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
	root := fixture(t, "v2")
	src, err := newCgroupV2(root, newFakeSys().env())
	if err != nil {
		t.Fatal(err)
	}
	remove(t, root, v2dir+"/memory.current")
	if _, err := src.Sample(); err == nil || !strings.Contains(err.Error(), "memory.current") {
		t.Errorf("Sample() after removing memory.current = %v, want an error naming it", err)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindRuntime: "runtime", KindCgroupV2: "cgroup v2", KindCgroupV1: "cgroup v1", 9: "unknown"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}
