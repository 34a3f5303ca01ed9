// Package sysfiletest holds checks that the tests of the packages whose
// sources read /proc and cgroup files (cpu, memory) share.
package sysfiletest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// MissingFile removes file (relative to root, a fixture tree) and checks
// that open(root) then fails as the sources' exported constructors say:
// no source, and an error that names the file and wraps fs.ErrNotExist.
func MissingFile[S comparable](t *testing.T, root, file string, open func(root string) (S, error)) {
	t.Helper()
	name := filepath.Join(root, file)
	if err := os.RemoveAll(name); err != nil {
		t.Fatal(err)
	}
	src, err := open(root)
	var none S
	if err == nil || src != none {
		t.Fatalf("without %s: %v, %v; want no source and an error", file, src, err)
	}
	if !strings.Contains(err.Error(), name) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %q, want one naming %s that wraps fs.ErrNotExist", err, name)
	}
}

// SampleNow returns what sample returns, failing t on an error, and
// checks that its time (at) is the time of the call, as a source's
// Sample says.
func SampleNow[S any](t *testing.T, sample func() (S, error), at func(S) time.Time) S {
	t.Helper()
	before := time.Now()
	s, err := sample()
	if err != nil {
		t.Fatalf("Sample(): %v", err)
	}
	if got := at(s); got.Before(before) || got.After(time.Now()) {
		t.Errorf("Sample() read at %v, want the time of the call (after %v)", got, before)
	}
	return s
}
