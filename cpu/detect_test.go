package cpu

import (
	"errors"
	"strings"
	"testing"
)

func withEnv(e sysenv) DetectOption { return func(o *detectOptions) { o.env = e } }

// TestDetect checks which source auto-detection picks on each fixture
// tree, and that broken files make it fall back instead of failing.
func TestDetect(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		breakIt func(t *testing.T, root string)
		want    string // type of the chosen source
		wantIn  string // in its String()
	}{
		{name: "v2 with quota", give: "v2-quota", want: "*cpu.cgroupV2", wantIn: "kubepods/pod1/c1"},
		{name: "v2 nested", give: "v2-nested", want: "*cpu.cgroupV2", wantIn: "cri-ctr.scope"},
		{name: "v2 cgroup namespace", give: "v2-ns", want: "*cpu.cgroupV2"},
		{name: "v2 without quota", give: "v2-noquota", want: "*cpu.cgroupV2", wantIn: "app.service"},
		{name: "v2 root cgroup → process", give: "v2-root", want: "*cpu.process", wantIn: "cgroup v2: root cgroup"},
		{name: "v1 (hybrid, v2 without cpu)", give: "v1", want: "*cpu.cgroupV1", wantIn: "docker/abc"},
		{name: "v1 combined container view", give: "v1-combined", want: "*cpu.cgroupV1", wantIn: "cpu,cpuacct"},
		{name: "v1 root cgroup → process", give: "v1-root", want: "*cpu.process", wantIn: "cgroup v1: root cgroup"},
		{name: "no cgroup → process", give: "host-only", want: "*cpu.process", wantIn: "no cgroup v1"},
		{
			name: "v2 cpu.stat missing → process", give: "v2-quota",
			breakIt: func(t *testing.T, r string) { remove(t, r, v2quotaDir+"/cpu.stat") },
			want:    "*cpu.process", wantIn: "cgroup v2 unreadable",
		},
		{
			name: "v2 cpu.max garbage → process", give: "v2-nested",
			breakIt: func(t *testing.T, r string) { write(t, r, v2nestedDir+"/cpu.max", "?\n") },
			want:    "*cpu.process", wantIn: "cgroup v2 unreadable",
		},
		{
			name: "v1 cpuacct.usage missing → process", give: "v1",
			breakIt: func(t *testing.T, r string) { remove(t, r, "sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage") },
			want:    "*cpu.process", wantIn: "cgroup v1 unreadable",
		},
		{
			name: "mountinfo missing → process", give: "v1",
			breakIt: func(t *testing.T, r string) { remove(t, r, procMountinfo) },
			want:    "*cpu.process", wantIn: "cgroup v1 unreadable",
		},
		{
			name: "process unavailable → host", give: "v1-root",
			breakIt: func(t *testing.T, r string) { remove(t, r, procTasks) },
			want:    "*cpu.detectedHost", wantIn: "process CPU time unavailable",
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
			if got := typeName(src); got != tt.want {
				t.Errorf("Detect() = %s (%s), want %s", got, src, tt.want)
			}
			if !strings.Contains(src.String(), tt.wantIn) {
				t.Errorf("Detect().String() = %q, want it to contain %q", src, tt.wantIn)
			}
			if _, err := src.Sample(); err != nil {
				t.Errorf("Detect().Sample() error = %v", err)
			}
		})
	}
}

func typeName(s Source) string {
	switch s.(type) {
	case *cgroupV2:
		return "*cpu.cgroupV2"
	case *cgroupV1:
		return "*cpu.cgroupV1"
	case *process:
		return "*cpu.process"
	case *detectedHost:
		return "*cpu.detectedHost"
	case *host:
		return "*cpu.host"
	}
	return "unknown"
}

func TestDetectNothingWorks(t *testing.T) {
	root := fixture(t, "host-only")
	remove(t, root, procTasks)
	remove(t, root, procStat)
	_, err := Detect(WithRoot(root), withEnv(newFakeSys().env()))
	if !errors.Is(err, ErrNoSource) {
		t.Fatalf("Detect() error = %v, want ErrNoSource", err)
	}
	for _, name := range []string{procTasks, procStat} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("Detect() error %q does not name %s", err, name)
		}
	}
}
