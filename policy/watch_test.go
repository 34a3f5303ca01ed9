package policy

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// watching loads path and watches it; it returns the Reloader and a wait
// that blocks until the policy in force is content's, at most 5 s.
func watching(t *testing.T, path string) (*Reloader, func(what, content string)) {
	t.Helper()
	r, err := NewReloader(path, WithLogf(func(string, ...any) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	reports := reportTo(r)
	if err := r.Watch(); err != nil {
		t.Fatal(err)
	}
	return r, func(what, content string) {
		t.Helper()
		want := mustDecode(t, content).Hash()
		timeout := time.After(5 * time.Second)
		for r.Hash() != want {
			select {
			case <-reports:
			case <-timeout:
				t.Fatalf("policy not reloaded within 5 s after %s", what)
			}
		}
	}
}

// reportTo returns a channel that receives the outcome of r's reloads
// (those it has room for).
func reportTo(r *Reloader) <-chan error {
	reports := make(chan error, 16)
	r.reported = func(err error) {
		select { // never block a reload, which holds the Reloader's lock
		case reports <- err:
		default:
		}
	}
	return reports
}

// version returns twoGuards with its limit of 10 set to n.
func version(n int) string {
	return strings.Replace(twoGuards, "limit: 10", "limit: "+strconv.Itoa(n), 1)
}

// renameOver writes content to a temporary file beside path and renames
// it over path, as editors and config tools replace a file atomically.
func renameOver(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	write(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// symlinkOver points the symlink at link to target by renaming a new
// symlink over it (ln -sfn is not atomic; this is).
func symlinkOver(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".tmp"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

// TestWatchAtomicRename: a file replaced by a rename over it is reloaded,
// each time.
func TestWatchAtomicRename(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write(t, path, version(10))
	_, wait := watching(t, path)
	for n := 11; n <= 13; n++ {
		renameOver(t, path, version(n))
		wait("a rename over the file", version(n))
	}
}

// TestWatchSymlinkToFile: the file is a symlink to a file in another
// directory; the symlink is swapped to a file in a third directory, and
// that file is then replaced by a rename.
func TestWatchSymlinkToFile(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"etc", "v1", "v2"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(base, "v1", "policy.yaml"), version(10))
	path := filepath.Join(base, "etc", "policy.yaml")
	if err := os.Symlink(filepath.Join(base, "v1", "policy.yaml"), path); err != nil {
		t.Fatal(err)
	}
	_, wait := watching(t, path)
	renameOver(t, filepath.Join(base, "v1", "policy.yaml"), version(11))
	wait("a rename over the symlink's target", version(11))
	write(t, filepath.Join(base, "v2", "policy.yaml"), version(12))
	symlinkOver(t, filepath.Join(base, "v2", "policy.yaml"), path)
	wait("the symlink swapped to another directory", version(12))
	renameOver(t, filepath.Join(base, "v2", "policy.yaml"), version(13))
	wait("a rename over the new target", version(13))
}

// swappedRelease lays out a deploy of releases under a temporary
// directory, base: the file is reached through base/current, a symlink to
// releases/1 that the watch follows, then swapped to releases/2, after
// which releases/1 is removed. It returns base, the symlink's path and
// watching's wait, once the policy of releases/2 is in force.
func swappedRelease(t *testing.T) (base, current string, wait func(what, content string)) {
	t.Helper()
	base = t.TempDir()
	for _, d := range []string{"releases", "releases/1", "releases/2"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(base, "releases/1/policy.yaml"), version(10))
	current = filepath.Join(base, "current")
	if err := os.Symlink("releases/1", current); err != nil {
		t.Fatal(err)
	}
	_, wait = watching(t, filepath.Join(current, "policy.yaml"))
	write(t, filepath.Join(base, "releases/2/policy.yaml"), version(11))
	symlinkOver(t, "releases/2", current)
	wait("the directory's symlink swapped", version(11))
	if err := os.RemoveAll(filepath.Join(base, "releases/1")); err != nil {
		t.Fatal(err)
	}
	return base, current, wait
}

// TestWatchSymlinkedDirectorySwap: the file's directory is reached through
// a symlink that a deploy swaps to a new release ("current" ->
// releases/2), as Capistrano-style deploys and some config tools do; the
// swap happens in a directory above the file's.
func TestWatchSymlinkedDirectorySwap(t *testing.T) {
	base, current, wait := swappedRelease(t)
	if err := os.Mkdir(filepath.Join(base, "releases/3"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(base, "releases/3/policy.yaml"), version(12))
	symlinkOver(t, "releases/3", current)
	wait("the directory's symlink swapped again", version(12))
}

// TestWatchRecreatedDirectory: a directory the watch followed is removed,
// then re-created under its name and the symlink swapped back to it (a
// rollback re-extracting the release); a later rename over the file in
// it is seen. Before, the Reloader still took the directory for watched
// after the kernel had ended its watch with it, so no later change there
// was ever reloaded.
func TestWatchRecreatedDirectory(t *testing.T) {
	base, current, wait := swappedRelease(t)
	if err := os.Mkdir(filepath.Join(base, "releases/1"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(base, "releases/1/policy.yaml"), version(12))
	symlinkOver(t, "releases/1", current)
	wait("the symlink swapped back to the re-created directory", version(12))
	// The swap's first event may reload it; let the watch take in the
	// others, or one of them could read the rename below without a watch
	// on the directory.
	time.Sleep(100 * time.Millisecond)
	renameOver(t, filepath.Join(base, "releases/1/policy.yaml"), version(13))
	wait("a rename over the file in the re-created directory", version(13))
}

// TestWatchedDirs lists the directories watched for each layout, without
// a watch.
func TestWatchedDirs(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"cm", "cm/..v1", "releases", "releases/1", "plain"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(base, "cm/..v1/policy.yaml"), "x")
	write(t, filepath.Join(base, "releases/1/policy.yaml"), "x")
	write(t, filepath.Join(base, "plain/policy.yaml"), "x")
	for _, l := range [][2]string{{"..v1", "cm/..data"}, {"..data/policy.yaml", "cm/policy.yaml"}, {"releases/1", "current"}} {
		if err := os.Symlink(l[0], filepath.Join(base, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		give string
		want []string
	}{
		{"plain/policy.yaml", []string{"plain"}},
		{"cm/policy.yaml", []string{"cm", "cm/..v1"}},
		{"current/policy.yaml", []string{"current", ".", "releases/1"}},
		{"missing/policy.yaml", []string{"missing"}},
	}
	for _, tt := range tests {
		var want []string
		for _, d := range tt.want {
			want = append(want, filepath.Join(base, d))
		}
		if got := watchedDirs(filepath.Join(base, tt.give)); !slices.Equal(got, want) {
			t.Errorf("watchedDirs(%s) = %q, want %q", tt.give, got, want)
		}
	}
}
