package sysfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// The files a Parser reads to locate a cgroup, relative to the filesystem
// root given to it ("/" in production, a fixture tree in tests).
const (
	Mountinfo  = "proc/self/mountinfo"
	SelfCgroup = "proc/self/cgroup"
)

// CleanRoot returns root, or "/" when root is empty.
func CleanRoot(root string) string {
	if root == "" {
		return "/"
	}
	return root
}

// NotExist reports whether err says a file does not exist.
func NotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// Parser parses the /proc and cgroup files of one signal package (cpu,
// memory): its errors read as that package's and match its sentinels.
// Its zero value reports errors that match nothing; it holds no state
// and is safe for concurrent use.
type Parser struct {
	Pkg           string // the package's name, the prefix of its messages ("cpu")
	ErrFormat     error  // what an error in a file's content matches
	ErrNotMounted error  // what a missing or unreachable cgroup matches
}

// Errorf returns an error in the content of file name, with the message
// fmt.Sprintf(format, args...) after the name; it matches p.ErrFormat.
func (p Parser) Errorf(format, name string, args ...any) error {
	return &fileError{name: name, msg: fmt.Sprintf(format, args...), kind: p.ErrFormat}
}

// fileError is a parse error in a named file; it matches kind.
type fileError struct {
	name, msg string
	kind      error
}

func (e *fileError) Error() string        { return e.name + ": " + e.msg }
func (e *fileError) Is(target error) bool { return target == e.kind }

// Mount is one cgroup line of /proc/self/mountinfo.
type Mount struct {
	FSType string   // "cgroup" (v1) or "cgroup2"
	Root   string   // root of the mount inside the hierarchy
	Point  string   // mount point, absolute, relative to the filesystem root
	Opts   []string // super options; for v1 they name the controllers
}

// Has reports whether controller is one of m's options.
func (m Mount) Has(controller string) bool {
	for _, o := range m.Opts {
		if o == controller {
			return true
		}
	}
	return false
}

// Mounts returns the cgroup mounts listed in proc/self/mountinfo under root.
func (p Parser) Mounts(root string) ([]Mount, error) {
	name := filepath.Join(root, Mountinfo)
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var mounts []Mount
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			return nil, p.Errorf("no separator in %q", name, line)
		}
		pf, sf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(sf) < 3 {
			return nil, p.Errorf("short line %q", name, line)
		}
		if sf[0] != "cgroup" && sf[0] != "cgroup2" {
			continue
		}
		mounts = append(mounts, Mount{
			FSType: sf[0],
			Root:   unescapeMount(pf[3]),
			Point:  unescapeMount(pf[4]),
			Opts:   strings.Split(sf[2], ","),
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

// CgroupPaths is proc/self/cgroup: the v2 path ("" when there is no v2
// line) and the v1 path of each controller.
type CgroupPaths struct {
	V2    string
	HasV2 bool
	V1    map[string]string
}

// CgroupPaths reads proc/self/cgroup under root.
func (p Parser) CgroupPaths(root string) (CgroupPaths, error) {
	name := filepath.Join(root, SelfCgroup)
	data, err := os.ReadFile(name)
	if err != nil {
		return CgroupPaths{}, err
	}
	c := CgroupPaths{V1: map[string]string{}}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			return CgroupPaths{}, p.Errorf("line %q is not id:controllers:path", name, line)
		}
		if f[0] == "0" && f[1] == "" {
			c.V2, c.HasV2 = f[2], true
			continue
		}
		for _, ctl := range strings.Split(f[1], ",") {
			c.V1[ctl] = f[2]
		}
	}
	return c, nil
}

// CgroupDir locates the directory of the cgroup at cgPath (as listed in
// /proc/self/cgroup) under mount m. It returns the directory, the mount
// point directory, and whether the cgroup is the root of the whole
// hierarchy (it then holds every process of the host). cgPath is cleaned
// first; one whose ".." climb above the hierarchy's root (the kernel
// writes such a path for a cgroup outside the process's cgroup
// namespace), or that is not under the mount's root, is not under the
// mount point and is refused with an error matching p.ErrNotMounted.
func (p Parser) CgroupDir(root string, m Mount, cgPath string) (dir, top string, isRoot bool, err error) {
	clean := path.Clean(strings.TrimPrefix(cgPath, "/"))
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", "", false, fmt.Errorf("%w: cgroup path %q is outside the hierarchy (it climbs above its root), so outside the mount at %s",
			p.ErrNotMounted, cgPath, m.Point)
	}
	clean = path.Join("/", clean)
	rel := clean
	if m.Root != "/" {
		switch {
		case clean == m.Root:
			rel = "/"
		case strings.HasPrefix(clean, m.Root+"/"):
			rel = clean[len(m.Root):]
		default:
			return "", "", false, fmt.Errorf("%w: cgroup path %q is outside the root %q of the mount at %s",
				p.ErrNotMounted, cgPath, m.Root, m.Point)
		}
	}
	top = filepath.Join(root, m.Point)
	return filepath.Join(top, rel), top, clean == "/" && m.Root == "/", nil
}

// FindMount returns the first of mounts of type fstype that has
// controller ("" for any).
func FindMount(mounts []Mount, fstype, controller string) (Mount, bool) {
	for _, m := range mounts {
		if m.FSType == fstype && (controller == "" || m.Has(controller)) {
			return m, true
		}
	}
	return Mount{}, false
}

// Cgroup is where the process's cgroup of one controller is.
type Cgroup struct {
	Dir    string // its directory
	Top    string // the directory of its hierarchy's mount point
	IsRoot bool   // it is the root of the whole hierarchy
}

// V2 locates the process's cgroup v2 under root. probe is a file
// (cpu.max, memory.max) that the real root of the hierarchy lacks: a
// cgroup that looks like the root but has it is one inside a cgroup
// namespace, and not the root.
func (p Parser) V2(root, probe string) (Cgroup, error) {
	mounts, err := p.Mounts(root)
	if err != nil {
		return Cgroup{}, fmt.Errorf("%s: cgroup v2: %w", p.Pkg, err)
	}
	m, ok := FindMount(mounts, "cgroup2", "")
	if !ok {
		return Cgroup{}, fmt.Errorf("%w: cgroup v2 (no cgroup2 line in %s)", p.ErrNotMounted, filepath.Join(root, Mountinfo))
	}
	paths, err := p.CgroupPaths(root)
	if err != nil {
		return Cgroup{}, fmt.Errorf("%s: cgroup v2: %w", p.Pkg, err)
	}
	if !paths.HasV2 {
		return Cgroup{}, fmt.Errorf("%w: cgroup v2 (no 0:: line in %s)", p.ErrNotMounted, filepath.Join(root, SelfCgroup))
	}
	dir, top, isRoot, err := p.CgroupDir(root, m, paths.V2)
	if err != nil {
		return Cgroup{}, fmt.Errorf("%s: cgroup v2: %w", p.Pkg, err)
	}
	if isRoot {
		if _, err := os.Stat(filepath.Join(dir, probe)); err == nil {
			isRoot = false
		}
	}
	return Cgroup{Dir: dir, Top: top, IsRoot: isRoot}, nil
}

// V1 locates the process's cgroup v1 of controller (cpuacct, memory)
// under root.
func (p Parser) V1(root, controller string) (Cgroup, error) {
	mounts, err := p.Mounts(root)
	if err != nil {
		return Cgroup{}, fmt.Errorf("%s: cgroup v1: %w", p.Pkg, err)
	}
	m, ok := FindMount(mounts, "cgroup", controller)
	if !ok {
		return Cgroup{}, fmt.Errorf("%w: cgroup v1 %s (not in %s)", p.ErrNotMounted, controller, filepath.Join(root, Mountinfo))
	}
	paths, err := p.CgroupPaths(root)
	if err != nil {
		return Cgroup{}, fmt.Errorf("%s: cgroup v1: %w", p.Pkg, err)
	}
	path, ok := paths.V1[controller]
	if !ok {
		return Cgroup{}, fmt.Errorf("%w: cgroup v1 (no %s line in %s)", p.ErrNotMounted, controller, filepath.Join(root, SelfCgroup))
	}
	dir, top, isRoot, err := p.CgroupDir(root, m, path)
	if err != nil {
		return Cgroup{}, fmt.Errorf("%s: cgroup v1: %w", p.Pkg, err)
	}
	return Cgroup{Dir: dir, Top: top, IsRoot: isRoot}, nil
}

// V2Has reports whether a cgroup2 hierarchy is mounted under root with
// controller available (not a hybrid host whose v2 tree has none).
func (p Parser) V2Has(root, controller string) bool {
	mounts, err := p.Mounts(root)
	if err != nil {
		return false
	}
	m, ok := FindMount(mounts, "cgroup2", "")
	if !ok {
		return false
	}
	data, err := os.ReadFile(filepath.Join(root, m.Point, "cgroup.controllers"))
	if err != nil {
		return false
	}
	for _, c := range strings.Fields(string(data)) {
		if c == controller {
			return true
		}
	}
	return false
}

// KV parses "key value" lines (cpu.stat, memory.stat) into the requested
// keys; a missing key is left 0 and its bit in found is clear.
func (p Parser) KV(files *Files, name string, keys []string, vals []uint64) (found int, err error) {
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
					return found, p.Errorf("%s %q", name, k, v)
				}
				vals[i] = n
				found |= 1 << i
			}
		}
	}
	return found, nil
}

// Uint reads a file holding one unsigned integer (cpuacct.usage,
// memory.current).
func (p Parser) Uint(files *Files, name string) (uint64, error) {
	data, err := files.ReadFile(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, p.Errorf("%q is not a number", name, strings.TrimSpace(string(data)))
	}
	return n, nil
}
