package memory

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// JoinEnv names the environment variable by which the demo tells a
// `levee serve` child which cgroup to join: the path of that cgroup's
// cgroup.procs. The child writes its pid there before it allocates
// anything of note (Join), so that every byte it uses is charged to the
// cgroup whose limit the demo set.
const JoinEnv = "LEVEE_DEMO_CGROUP_PROCS"

// Join moves this process into the cgroup named by JoinEnv, if set. It
// is what `levee serve` calls first.
func Join() error {
	procs := os.Getenv(JoinEnv)
	if procs == "" {
		return nil
	}
	if err := os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		return fmt.Errorf("joining the demo's memory cgroup: %w", err)
	}
	return nil
}

// box is a memory cgroup made for one server: a child of this process's
// own memory cgroup, with a hard limit. Create it with newBox; remove it
// when its process has exited.
type box struct {
	dir string
	v2  bool
}

// cgroupRoot is where the hierarchies are mounted; tests change it.
var cgroupRoot = "/sys/fs/cgroup"

// newBox makes a memory cgroup called name under this process's own, on
// cgroup v2 if its hierarchy has the memory controller, else on v1, with
// limit bytes as its hard limit (and no swap beyond it). The error says
// in one line why no cgroup could be made.
func newBox(name string, limit int64) (*box, error) {
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	var errs []error
	if p, ok := own[""]; ok && v2Memory() {
		b, err := makeV2(filepath.Join(cgroupRoot, p), name, limit)
		if err == nil {
			return b, nil
		}
		errs = append(errs, err)
	}
	if p, ok := own["memory"]; ok {
		b, err := makeV1(filepath.Join(cgroupRoot, "memory", p), name, limit)
		if err == nil {
			return b, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, errors.New("no cgroup v2 memory controller and no cgroup v1 memory hierarchy")
	}
	return nil, errors.Join(errs...)
}

// ownCgroups reads /proc/self/cgroup: the path of this process's cgroup
// by controller list ("" for v2's unified line; v1 lines by each
// controller they name).
func ownCgroups() (map[string]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, sc.Err()
}

// v2Memory reports whether a cgroup2 hierarchy with the memory controller
// is mounted at cgroupRoot (pure v2) or cgroupRoot/unified (hybrid).
func v2Memory() bool {
	b, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil && strings.Contains(" "+strings.TrimSpace(string(b))+" ", " memory ")
}

func makeV1(parent, name string, limit int64) (*box, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	b := &box{dir: dir}
	lim := strconv.FormatInt(limit, 10)
	// The charges of the joining process move with it, and swap (when the
	// kernel accounts it) is held to the same limit: no swap beyond it.
	_ = write(dir, "memory.move_charge_at_immigrate", "3")
	if err := write(dir, "memory.limit_in_bytes", lim); err != nil {
		b.remove()
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	_ = write(dir, "memory.memsw.limit_in_bytes", lim)
	return b, nil
}

func makeV2(parent, name string, limit int64) (*box, error) {
	// A cgroup v2 child gets the memory controller only if its parent
	// delegates it.
	if err := write(parent, "cgroup.subtree_control", "+memory"); err != nil {
		return nil, fmt.Errorf("cgroup v2: enabling the memory controller under %s: %w", parent, err)
	}
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	b := &box{dir: dir, v2: true}
	if err := write(dir, "memory.max", strconv.FormatInt(limit, 10)); err != nil {
		b.remove()
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	_ = write(dir, "memory.swap.max", "0")
	return b, nil
}

func write(dir, file, v string) error {
	return os.WriteFile(filepath.Join(dir, file), []byte(v), 0)
}

func readUint(dir, file string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// String names the cgroup and its hierarchy.
func (b *box) String() string {
	if b.v2 {
		return "cgroup v2 " + b.dir
	}
	return "cgroup v1 " + b.dir
}

// procs is the file a process writes its pid to, to join.
func (b *box) procs() string { return filepath.Join(b.dir, "cgroup.procs") }

// usage is the memory charged to the cgroup now.
func (b *box) usage() uint64 {
	f := "memory.usage_in_bytes"
	if b.v2 {
		f = "memory.current"
	}
	v, _ := readUint(b.dir, f)
	return v
}

// peak is the most memory charged to the cgroup since it was made, and
// false where the kernel does not keep it (v2 before Linux 5.19).
func (b *box) peak() (uint64, bool) {
	f := "memory.max_usage_in_bytes"
	if b.v2 {
		f = "memory.peak"
	}
	v, err := readUint(b.dir, f)
	return v, err == nil
}

// oomKills counts the processes of the cgroup the OOM killer killed.
func (b *box) oomKills() uint64 {
	f := "memory.oom_control"
	if b.v2 {
		f = "memory.events"
	}
	data, err := os.ReadFile(filepath.Join(b.dir, f))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// remove deletes the cgroup; its processes must have exited.
func (b *box) remove() { _ = os.Remove(b.dir) }

// CanLimit reports, by making and removing one, whether this process can
// make the memory cgroups the scenario puts its servers in; the error
// says in one line why not.
func CanLimit() error {
	b, err := newBox(fmt.Sprintf("levee-demo-%d-probe", os.Getpid()), 64<<20)
	if err != nil {
		return err
	}
	b.remove()
	return nil
}
