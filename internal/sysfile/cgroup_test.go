package sysfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnescapeMount(t *testing.T) {
	tests := []struct{ give, want string }{
		{`/sys/fs/cgroup`, `/sys/fs/cgroup`},
		{`/mnt/with\040space`, `/mnt/with space`},
		{`/a\134b`, `/a\b`},
		{`/trailing\04`, `/trailing\04`},
	}
	for _, tt := range tests {
		if got := unescapeMount(tt.give); got != tt.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

// TestParserErrorsMatchItsSentinels: a Parser's errors match the
// sentinels of the package it was made for, and no other package's.
func TestParserErrorsMatchItsSentinels(t *testing.T) {
	errFormat, errNotMounted, other := errors.New("x: format"), errors.New("x: not mounted"), errors.New("y: format")
	p := Parser{Pkg: "x", ErrFormat: errFormat, ErrNotMounted: errNotMounted}

	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc/self"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, Mountinfo), []byte("no separator here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := p.Mounts(root)
	if !errors.Is(err, errFormat) || errors.Is(err, other) {
		t.Errorf("Parser.Mounts(bad mountinfo) = %v, want an error matching only its ErrFormat", err)
	}
	_, err = p.V2(root, "x.max")
	if !errors.Is(err, errFormat) || err.Error()[:len("x: cgroup v2: ")] != "x: cgroup v2: " {
		t.Errorf("Parser.V2(bad mountinfo) = %v, want \"x: cgroup v2: ...\" matching ErrFormat", err)
	}
	_, _, _, err = p.CgroupDir(root, Mount{Root: "/a", Point: "/m"}, "/b")
	if !errors.Is(err, errNotMounted) {
		t.Errorf("Parser.CgroupDir(path outside the mount) = %v, want an error matching ErrNotMounted", err)
	}
}

// TestCgroupPathStaysUnderMount: the cgroup path of proc/self/cgroup is
// joined to its mount point, and one whose ".." climb above the mount
// (after the mount's root is cut off, and after cleaning) is refused as
// not mounted — it would name a directory outside the cgroup hierarchy.
// The kernel writes such paths for a process whose cgroup lies outside
// its cgroup namespace's root. A ".." that stays inside, and a name
// that merely starts with "..", are accepted.
func TestCgroupPathStaysUnderMount(t *testing.T) {
	errNotMounted := errors.New("x: not mounted")
	p := Parser{Pkg: "x", ErrFormat: errors.New("x: format"), ErrNotMounted: errNotMounted}
	const (
		v2Mount = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
		v1Mount = "32 31 0:29 /kubepods /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
		v2Slash = "30 1 0:26 / / rw - cgroup2 cgroup2 rw\n"
	)
	tests := []struct {
		name      string
		mountinfo string
		cgroup    string
		v1        bool   // locate the v1 cpu cgroup, not the v2 one
		want      string // the directory, relative to the fixture root; "" for an error
	}{
		{name: "v2 plain", mountinfo: v2Mount, cgroup: "0::/a/b\n", want: "sys/fs/cgroup/a/b"},
		{name: "v2 dot-dot inside", mountinfo: v2Mount, cgroup: "0::/a/../b\n", want: "sys/fs/cgroup/b"},
		{name: "v2 name starting with dots", mountinfo: v2Mount, cgroup: "0::/..a\n", want: "sys/fs/cgroup/..a"},
		{name: "v2 escapes to a sibling", mountinfo: v2Mount, cgroup: "0::/../x\n"},
		{name: "v2 escapes to the parent", mountinfo: v2Mount, cgroup: "0::/..\n"},
		{name: "v2 escapes after descending", mountinfo: v2Mount, cgroup: "0::/a/../../../etc\n"},
		{name: "v2 mounted at the root escapes the fixture", mountinfo: v2Slash, cgroup: "0::/../x\n"},
		{name: "v1 plain", mountinfo: v1Mount, cgroup: "4:cpu:/kubepods/pod1\n", v1: true, want: "sys/fs/cgroup/cpu/pod1"},
		{name: "v1 dot-dot back into the mount's root", mountinfo: v1Mount, cgroup: "4:cpu:/kubepods/../kubepods/pod1\n", v1: true, want: "sys/fs/cgroup/cpu/pod1"},
		{name: "v1 escapes past the mount's root", mountinfo: v1Mount, cgroup: "4:cpu:/kubepods/../x\n", v1: true},
		{name: "v1 escapes past the mount", mountinfo: v1Mount, cgroup: "4:cpu:/kubepods/../../x\n", v1: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "proc/self"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, Mountinfo), []byte(tt.mountinfo), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, SelfCgroup), []byte(tt.cgroup), 0o644); err != nil {
				t.Fatal(err)
			}
			var c Cgroup
			var err error
			if tt.v1 {
				c, err = p.V1(root, "cpu")
			} else {
				c, err = p.V2(root, "x.max")
			}
			if tt.want == "" {
				if !errors.Is(err, errNotMounted) {
					t.Fatalf("cgroup %q: Cgroup{Dir: %q}, error %v; want an error matching ErrNotMounted", tt.cgroup, c.Dir, err)
				}
				if !strings.Contains(err.Error(), "outside") || !strings.Contains(err.Error(), strings.TrimSpace(tt.cgroup[strings.LastIndex(tt.cgroup, ":")+1:])) {
					t.Errorf("cgroup %q: error %q, want it to name the path and say it is outside the mount", tt.cgroup, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("cgroup %q: error %v, want %s", tt.cgroup, err, tt.want)
			}
			if want := filepath.Join(root, tt.want); c.Dir != want {
				t.Fatalf("cgroup %q: Dir %q, want %q", tt.cgroup, c.Dir, want)
			}
		})
	}
}
