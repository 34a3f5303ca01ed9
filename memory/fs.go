package memory

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/levee-go/levee/internal/sysfile"
)

// The files this package reads, relative to the filesystem root given to
// the constructors ("/" in production, a fixture tree in tests). The
// mountinfo and cgroup parsing below is the same as package cpu's; it is
// repeated rather than shared so that each signal package stands alone.
const (
	procMountinfo = "proc/self/mountinfo"
	procCgroup    = "proc/self/cgroup"
)

func cleanRoot(root string) string {
	if root == "" {
		return "/"
	}
	return root
}

// mount is one cgroup line of /proc/self/mountinfo.
type mount struct {
	fstype string   // "cgroup" (v1) or "cgroup2"
	root   string   // root of the mount inside the hierarchy
	point  string   // mount point, absolute, relative to the filesystem root
	opts   []string // super options; for v1 they name the controllers
}

func (m mount) has(controller string) bool {
	for _, o := range m.opts {
		if o == controller {
			return true
		}
	}
	return false
}

// readMounts returns the cgroup mounts listed in proc/self/mountinfo.
func readMounts(root string) ([]mount, error) {
	name := filepath.Join(root, procMountinfo)
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var mounts []mount
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			return nil, formatError("no separator in %q", name, line)
		}
		pf, sf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(sf) < 3 {
			return nil, formatError("short line %q", name, line)
		}
		if sf[0] != "cgroup" && sf[0] != "cgroup2" {
			continue
		}
		mounts = append(mounts, mount{
			fstype: sf[0],
			root:   unescapeMount(pf[3]),
			point:  unescapeMount(pf[4]),
			opts:   strings.Split(sf[2], ","),
		})
	}
	return mounts, sc.Err()
}

// unescapeMount decodes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupPaths is proc/self/cgroup: the v2 path and the v1 path of each
// controller.
type cgroupPaths struct {
	v2    string
	hasV2 bool
	v1    map[string]string
}

func readCgroupPaths(root string) (cgroupPaths, error) {
	name := filepath.Join(root, procCgroup)
	data, err := os.ReadFile(name)
	if err != nil {
		return cgroupPaths{}, err
	}
	p := cgroupPaths{v1: map[string]string{}}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			return cgroupPaths{}, formatError("line %q is not id:controllers:path", name, line)
		}
		if f[0] == "0" && f[1] == "" {
			p.v2, p.hasV2 = f[2], true
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			p.v1[c] = f[2]
		}
	}
	return p, nil
}

// cgroupDir locates the directory of the cgroup at path (as listed in
// /proc/self/cgroup) under mount m. It returns the directory, the mount
// point directory, and whether the cgroup is the root of the whole
// hierarchy (it then holds every process of the host).
func cgroupDir(root string, m mount, path string) (dir, top string, isRoot bool, err error) {
	rel := path
	if m.root != "/" {
		switch {
		case path == m.root:
			rel = "/"
		case strings.HasPrefix(path, m.root+"/"):
			rel = path[len(m.root):]
		default:
			return "", "", false, fmt.Errorf("%w: cgroup path %q is outside the root %q of the mount at %s",
				ErrNotMounted, path, m.root, m.point)
		}
	}
	top = filepath.Join(root, m.point)
	return filepath.Join(top, rel), top, path == "/" && m.root == "/", nil
}

func findMount(mounts []mount, fstype, controller string) (mount, bool) {
	for _, m := range mounts {
		if m.fstype == fstype && (controller == "" || m.has(controller)) {
			return m, true
		}
	}
	return mount{}, false
}

// readKV parses "key value" lines (memory.stat, memory.events) into the
// requested keys; a missing key is left 0 and its bit in found is clear.
func readKV(files *sysfile.Files, name string, keys []string, vals []uint64) (found int, err error) {
	data, err := files.ReadFile(name)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		for i, want := range keys {
			if k == want {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return found, formatError("%s %q", name, k, v)
				}
				vals[i] = n
				found |= 1 << i
			}
		}
	}
	return found, nil
}

// readUint reads a file holding one unsigned integer (memory.current).
func readUint(files *sysfile.Files, name string) (uint64, error) {
	data, err := files.ReadFile(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, formatError("%q is not a number", name, strings.TrimSpace(string(data)))
	}
	return n, nil
}

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
		return 0, formatError("%q is neither a number nor \"max\"", name, s)
	}
	return n, nil
}

func notExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// fileError is a parse error in a named file; it matches ErrFormat.
type fileError struct{ name, msg string }

func (e *fileError) Error() string        { return e.name + ": " + e.msg }
func (e *fileError) Is(target error) bool { return target == ErrFormat }

func formatError(format, name string, args ...any) error {
	return &fileError{name: name, msg: fmt.Sprintf(format, args...)}
}
