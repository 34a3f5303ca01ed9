package sysfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestKeptDescriptorReadsAnew: a file of /proc read twice through one
// kept descriptor shows what changed in between (the thread's name).
func TestKeptDescriptorReadsAnew(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("keeps descriptors on Linux only")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	name := "/proc/thread-self/comm"
	before, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(unsafeName(strings.TrimSpace(string(before))))), 0, 0, 0)
	var f Files
	defer f.Close()
	if _, err := f.ReadFile(name); err != nil {
		t.Fatal(err)
	}
	if f.Kept() != 1 {
		t.Fatalf("Kept() = %d after reading %s, want 1", f.Kept(), name)
	}
	if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(unsafeName("levee-sysfile"))), 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	got, err := f.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != "levee-sysfile" || f.Kept() != 1 {
		t.Fatalf("second read through the kept descriptor = %q (kept %d), want the new name, 1 kept", got, f.Kept())
	}
}

// TestFileOnDiskReadAsItIs: a file on disk is read anew every time,
// nothing kept: rewritten, it reads its new contents; removed, it fails
// as os.ReadFile does.
func TestFileOnDiskReadAsItIs(t *testing.T) {
	name := filepath.Join(t.TempDir(), "cpu.stat")
	var f Files
	for _, want := range []string{"usage_usec 1\n", "usage_usec 22\n"} {
		if err := os.WriteFile(name, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := f.ReadFile(name)
		if err != nil || string(got) != want {
			t.Fatalf("ReadFile = %q, %v; want %q", got, err, want)
		}
	}
	if f.Kept() != 0 {
		t.Errorf("Kept() = %d for a file on disk, want 0", f.Kept())
	}
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadFile(name); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile of a removed file = %v, want not-exist", err)
	}
	var none *Files
	if _, err := none.ReadFile(name); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("nil Files: ReadFile of a removed file = %v, want not-exist", err)
	}
}

// TestForget: Forget closes the descriptors of the files not read since
// the last Forget, and keeps the others.
func TestForget(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("keeps descriptors on Linux only")
	}
	var f Files
	defer f.Close()
	for _, n := range []string{"/proc/self/stat", "/proc/self/statm"} {
		if _, err := f.ReadFile(n); err != nil {
			t.Fatal(err)
		}
	}
	f.Forget() // both read since: both kept
	if _, err := f.ReadFile("/proc/self/stat"); err != nil {
		t.Fatal(err)
	}
	if f.Kept() != 2 {
		t.Fatalf("Kept() = %d, want 2", f.Kept())
	}
	f.Forget() // statm not read since the last Forget
	if f.Kept() != 1 {
		t.Errorf("Kept() = %d after forgetting the file not read, want 1", f.Kept())
	}
}

// TestLargeFile: a file longer than the first buffer is read whole.
func TestLargeFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("keeps descriptors on Linux only")
	}
	var f Files
	defer f.Close()
	name := "/proc/self/smaps"
	want, err := os.ReadFile(name)
	if err != nil {
		t.Skip(err)
	}
	got, err := f.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) <= 4096 || len(got) < len(want)/2 {
		t.Fatalf("read %d bytes of %s (%d with os.ReadFile), want it whole and over 4096", len(got), name, len(want))
	}
}

// unsafeName is s as a NUL-terminated C string for prctl.
func unsafeName(s string) *byte {
	b := append([]byte(s), 0)
	return &b[0]
}
