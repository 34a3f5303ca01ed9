package cpu

import (
	"strconv"
	"strings"
	"time"

	"github.com/levee-go/levee/internal/sysfile"
)

// The files this package reads, relative to the filesystem root given to
// the constructors ("/" in production, a fixture tree in tests).
const (
	procMountinfo = sysfile.Mountinfo
	procCgroup    = sysfile.SelfCgroup
	procStat      = "proc/stat"
	procPressure  = "proc/pressure/cpu"
	procTasks     = "proc/self/task"
)

// parse reads the cgroup files; its errors match ErrFormat and
// ErrNotMounted and read "cpu: ...".
var parse = sysfile.Parser{Pkg: "cpu", ErrFormat: ErrFormat, ErrNotMounted: ErrNotMounted}

// readPressure parses a PSI file. ok is false when it is absent or
// disabled (reading gives EOPNOTSUPP); PSI is optional information.
func readPressure(files *sysfile.Files, name string) (Pressure, bool) {
	data, err := files.ReadFile(name)
	if err != nil {
		return Pressure{}, false
	}
	var p Pressure
	okAny := false
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			continue
		}
		var pl PressureLine
		good := true
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			if k == "total" {
				n, err := strconv.ParseUint(v, 10, 64)
				good = good && err == nil
				pl.Total = time.Duration(n) * time.Microsecond
				continue
			}
			x, err := strconv.ParseFloat(v, 64)
			good = good && err == nil
			switch k {
			case "avg10":
				pl.Avg10 = x
			case "avg60":
				pl.Avg60 = x
			case "avg300":
				pl.Avg300 = x
			}
		}
		if !good {
			continue
		}
		switch f[0] {
		case "some":
			p.Some, okAny = pl, true
		case "full":
			p.Full, okAny = pl, true
		}
	}
	return p, okAny
}
