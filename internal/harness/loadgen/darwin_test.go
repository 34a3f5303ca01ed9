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
	// One architecture: the build tags are the same on amd64.
	cmd := exec.Command("go", "build", "-o", os.DevNull, ".")
	cmd.Env = append(os.Environ(), "GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("GOOS=darwin GOARCH=arm64 go build: %v\n%s", err, out)
	}
}
