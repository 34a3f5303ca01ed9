package loadgen

import (
	"os"
	"os/exec"
	"testing"
)

// TestBuildsForDarwin: the load generator, and so `levee load` and
// `levee demo`, compiles for macOS, whose users the README sends to brew
// for redis-server. golang.org/x/sys/unix has no Nanosleep there, which
// sleep_unix.go called for every unix.
func TestBuildsForDarwin(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the package for another OS")
	}
	for _, arch := range []string{"arm64", "amd64"} {
		cmd := exec.Command("go", "build", "-o", os.DevNull, ".")
		cmd.Env = append(os.Environ(), "GOOS=darwin", "GOARCH="+arch, "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("GOOS=darwin GOARCH=%s go build: %v\n%s", arch, err, out)
		}
	}
}
