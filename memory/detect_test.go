package memory

import (
	"strings"
	"testing"
)

func withEnv(e sysenv) DetectOption { return func(o *detectOptions) { o.env = &e } }

// TestDetect checks which source auto-detection picks on each fixture
// tree, and that broken files make it fall back instead of failing.
func TestDetect(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		breakIt func(t *testing.T, root string)
		want    Kind
		wantIn  string // in its String()
	}{
		{name: "v2", give: "v2", want: KindCgroupV2, wantIn: "kubepods/pod1/c1"},
		{name: "v2 without a limit", give: "v2-nolimit", want: KindCgroupV2, wantIn: "app.service"},
		{name: "v2 cgroup namespace", give: "v2-ns", want: KindCgroupV2},
		{name: "v2 root cgroup → runtime", give: "v2-root", want: KindRuntime, wantIn: "cgroup v2: root cgroup"},
		{name: "v1 (hybrid, v2 without memory)", give: "v1", want: KindCgroupV1, wantIn: "docker/abc"},
		{name: "v1 container view", give: "v1-container", want: KindCgroupV1},
		{name: "v1 unlimited", give: "v1-unlimited", want: KindCgroupV1, wantIn: "process_api/x1"},
		{name: "v1 root cgroup → runtime", give: "v1-root", want: KindRuntime, wantIn: "cgroup v1: root cgroup"},
		{name: "no cgroup → runtime", give: "none", want: KindRuntime, wantIn: "no cgroup v1 memory controller"},
		{
			name: "v2 memory.current missing → runtime", give: "v2",
			breakIt: func(t *testing.T, r string) { remove(t, r, v2dir+"/memory.current") },
			want:    KindRuntime, wantIn: "cgroup v2 unreadable",
		},
		{
			name: "v2 without the memory controller → v1", give: "v1",
			breakIt: func(t *testing.T, r string) { write(t, r, "sys/fs/cgroup/unified/cgroup.controllers", "cpu io\n") },
			want:    KindCgroupV1,
		},
		{
			name: "v1 usage missing → runtime", give: "v1",
			breakIt: func(t *testing.T, r string) { remove(t, r, v1dir+"/memory.usage_in_bytes") },
			want:    KindRuntime, wantIn: "cgroup v1 unreadable",
		},
		{
			name: "mountinfo missing → runtime", give: "v1",
			breakIt: func(t *testing.T, r string) { remove(t, r, procMountinfo) },
			want:    KindRuntime, wantIn: "cgroup v1 unreadable",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixture(t, tt.give)
			if tt.breakIt != nil {
				tt.breakIt(t, root)
			}
			src, err := Detect(WithRoot(root), nil, withEnv(newFakeSys().env())) // a nil option is ignored
			if err != nil {
				t.Fatalf("Detect() error = %v, want a source", err)
			}
			s, err := src.Sample()
			if err != nil {
				t.Fatalf("Detect().Sample() error = %v", err)
			}
			if s.Kind != tt.want {
				t.Errorf("Detect().Sample().Kind = %v (%s), want %v", s.Kind, src, tt.want)
			}
			if !strings.Contains(src.String(), tt.wantIn) {
				t.Errorf("Detect().String() = %q, want it to contain %q", src, tt.wantIn)
			}
		})
	}
}
