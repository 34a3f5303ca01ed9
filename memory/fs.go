package memory

import (
	"strconv"
	"strings"

	"github.com/levee-go/levee/internal/sysfile"
)

// The files this package reads, relative to the filesystem root given to
// the constructors ("/" in production, a fixture tree in tests).
const (
	procMountinfo = sysfile.Mountinfo
	procCgroup    = sysfile.SelfCgroup
)

// parse reads the cgroup files; its errors match ErrFormat and
// ErrNotMounted and read "memory: ...".
var parse = sysfile.Parser{Pkg: "memory", ErrFormat: ErrFormat, ErrNotMounted: ErrNotMounted}

// readLimit reads a v2 limit file (memory.max, memory.high): a number of
// bytes or "max". It returns 0 for "max" (no limit).
func readLimit(files *sysfile.Files, name string) (uint64, error) {
	data, err := files.ReadFile(name)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, parse.Errorf("%q is neither a number nor \"max\"", name, s)
	}
	return n, nil
}
