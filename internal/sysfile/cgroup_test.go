package sysfile

import (
	"errors"
	"os"
	"path/filepath"
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
