package memory

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/sysfile/sysfiletest"
)

// TestExportedConstructors reads the fixture trees through NewCgroupV2
// and NewCgroupV1, and this process through NewRuntime, with the real
// runtime's view and clock: each sample has the fixture's cgroup
// counters and limits (none for the runtime source), its kind, this
// process's runtime readings, GOMEMLIMIT among them, and the time it was
// read; String names what is measured. The runtime source's only limit is
// GOMEMLIMIT.
func TestExportedConstructors(t *testing.T) {
	const gomemlimit = 1 << 40
	old := debug.SetMemoryLimit(gomemlimit)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	fromFixture := func(name string, ctor func(string) (Source, error)) func(t *testing.T) (Source, string, error) {
		return func(t *testing.T) (Source, string, error) {
			root := fixture(t, name)
			src, err := ctor(root)
			return src, root, err
		}
	}
	tests := []struct {
		name     string
		open     func(t *testing.T) (src Source, root string, err error)
		want     Cgroup
		wantKind Kind
		wantLim  uint64 // Sample.Limit
		wantStr  string // String(), with %s the root
	}{
		{
			name: "NewCgroupV2", open: fromFixture("v2", NewCgroupV2),
			want: Cgroup{Usage: 600 * MiB, InactiveFile: 100 * MiB, Max: 1000 * MiB,
				Events: Events{High: 3, Max: 2, OOM: 1, OOMKill: 1}},
			wantKind: KindCgroupV2, wantLim: 1000 * MiB, wantStr: "cgroup v2 %s/" + v2dir,
		},
		{
			name: "NewCgroupV1", open: fromFixture("v1", NewCgroupV1),
			want:     Cgroup{Usage: 300 * MiB, InactiveFile: 50 * MiB, Max: 500 * MiB, Events: Events{Max: 7, OOMKill: 2}},
			wantKind: KindCgroupV1, wantLim: 500 * MiB, wantStr: "cgroup v1 %s/" + v1dir,
		},
		{
			name: "NewRuntime",
			open: func(*testing.T) (Source, string, error) {
				src, err := NewRuntime()
				return src, "", err
			},
			wantKind: KindRuntime, wantLim: gomemlimit, wantStr: "runtime (GOMEMLIMIT only)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, root, err := tt.open(t)
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			s := sysfiletest.SampleNow(t, src.Sample, func(s Sample) time.Time { return s.Time })
			if s.Cgroup != tt.want || s.Kind != tt.wantKind {
				t.Errorf("Sample() Cgroup %+v, Kind %v; want %+v, %v", s.Cgroup, s.Kind, tt.want, tt.wantKind)
			}
			if rt := s.Runtime; rt.Limit != gomemlimit || rt.GOMAXPROCS != runtime.GOMAXPROCS(0) || rt.Goroutines == 0 || rt.Total == 0 {
				t.Errorf("Sample().Runtime = %+v, want this process's: Limit %d, GOMAXPROCS %d, goroutines, a Total", rt, gomemlimit, runtime.GOMAXPROCS(0))
			}
			if got := s.Limit(); got != tt.wantLim {
				t.Errorf("Sample().Limit() = %d, want %d", got, tt.wantLim)
			}
			if got, want := src.String(), strings.ReplaceAll(tt.wantStr, "%s", root); got != want {
				t.Errorf("String() = %q, want %q", got, want)
			}
		})
	}
}

// The exported cgroup constructors take a first sample and return its
// error, which names the file that could not be read, and no source.
func TestExportedConstructorsErrors(t *testing.T) {
	sysfiletest.MissingFile(t, fixture(t, "v2"), v2dir+"/memory.current", NewCgroupV2)
	sysfiletest.MissingFile(t, fixture(t, "v1"), v1dir+"/memory.usage_in_bytes", NewCgroupV1)
}
