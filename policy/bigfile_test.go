package policy

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBigFileIsNotReadWhole: a policy file far above MaxFileSize (a
// sparse 256 MiB file here; a device such as /dev/zero never ends) is
// refused by NewReloader and by Reload having read little more than
// MaxFileSize of it, and the policy in force is kept.
func TestBigFileIsNotReadWhole(t *testing.T) {
	const size = 256 << 20
	huge := filepath.Join(t.TempDir(), "huge.yaml")
	if err := os.WriteFile(huge, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, size); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	read := func(name string, load func() error) {
		t.Helper()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := load()
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "at most 1048576 allowed") {
			t.Errorf("%s of a %d MiB file: error %v, want the size error", name, size>>20, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 32<<20 {
			t.Errorf("%s of a %d MiB file allocated %d MiB, want a few: it read the whole file", name, size>>20, n>>20)
		}
	}
	read("NewReloader", func() error { _, err := NewReloader(huge, WithoutCPU()); return err })

	r, path, _ := newTestReloader(t, twoGuards, WithoutCPU())
	hash := r.Hash()
	if err := os.Rename(huge, path); err != nil {
		t.Fatal(err)
	}
	read("Reload", r.Reload)
	if r.Hash() != hash {
		t.Errorf("a refused file changed the policy in force")
	}
}
