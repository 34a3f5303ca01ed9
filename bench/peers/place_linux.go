//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// dieWithParent makes the child get SIGKILL if the benchmark dies, so a
// crashed or interrupted run leaves no server behind. The setting survives
// the exec of sh and taskset into the server.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// newCgroup creates a cgroup of cpus CPUs for the servers: a fresh cpu and
// cpuacct cgroup (v1) or a fresh cgroup with the cpu controller (v2),
// with a CFS quota of cpus CPUs, so that a server in it sees a container
// of that size whose usage counters are its own. It returns the
// cgroup.procs files a process writes its pid to in order to join, and a
// function that removes the cgroup once no process is left in it. It
// needs root (or a delegated hierarchy); any failure is returned and the
// caller runs the servers without it.
func newCgroup(name string, cpus int) (procs []string, remove func(), err error) {
	quota := strconv.Itoa(cpus * 100000)
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, nil, err
	}
	var dirs []string
	remove = func() {
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
	mk := func(mount string) (string, error) {
		dir := filepath.Join(mount, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
		dirs = append(dirs, dir)
		return dir, nil
	}
	write := func(file, value string) error {
		if err := os.WriteFile(file, []byte(value), 0o644); err != nil {
			return fmt.Errorf("writing %q to %s: %w", value, file, err)
		}
		return nil
	}
	fail := func(err error) ([]string, func(), error) {
		remove()
		return nil, nil, err
	}

	if mounts.v1CPU != "" && mounts.v1Acct != "" {
		cpuDir, err := mk(mounts.v1CPU)
		if err != nil {
			return fail(err)
		}
		if err := write(filepath.Join(cpuDir, "cpu.cfs_period_us"), "100000"); err != nil {
			return fail(err)
		}
		if err := write(filepath.Join(cpuDir, "cpu.cfs_quota_us"), quota); err != nil {
			return fail(err)
		}
		procs = append(procs, filepath.Join(cpuDir, "cgroup.procs"))
		if mounts.v1Acct != mounts.v1CPU { // co-mounted as cpu,cpuacct: one directory
			acctDir, err := mk(mounts.v1Acct)
			if err != nil {
				return fail(err)
			}
			procs = append(procs, filepath.Join(acctDir, "cgroup.procs"))
		}
		return procs, remove, nil
	}
	if mounts.v2 != "" {
		ctrl, err := os.ReadFile(filepath.Join(mounts.v2, "cgroup.controllers"))
		if err != nil {
			return fail(err)
		}
		if !strings.Contains(" "+string(ctrl)+" ", " cpu ") {
			return fail(fmt.Errorf("cgroup v2 at %s has no cpu controller", mounts.v2))
		}
		if err := write(filepath.Join(mounts.v2, "cgroup.subtree_control"), "+cpu"); err != nil {
			return fail(err)
		}
		dir, err := mk(mounts.v2)
		if err != nil {
			return fail(err)
		}
		if err := write(filepath.Join(dir, "cpu.max"), quota+" 100000"); err != nil {
			return fail(err)
		}
		return []string{filepath.Join(dir, "cgroup.procs")}, remove, nil
	}
	return fail(errors.New("no cgroup v1 cpu and cpuacct controllers and no cgroup v2 with cpu mounted"))
}

type mounts struct {
	v1CPU, v1Acct, v2 string
}

// cgroupMounts reads where the cgroup hierarchies are mounted from
// /proc/self/mountinfo.
func cgroupMounts() (mounts, error) {
	var m mounts
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return m, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 3 {
			continue
		}
		point := fields[4]
		switch tail[0] {
		case "cgroup2":
			if m.v2 == "" {
				m.v2 = point
			}
		case "cgroup":
			for _, opt := range strings.Split(tail[2], ",") {
				switch opt {
				case "cpu":
					m.v1CPU = point
				case "cpuacct":
					m.v1Acct = point
				}
			}
		}
	}
	return m, sc.Err()
}

// processCPU returns the CPU time (user + system) process pid has used,
// from /proc/PID/stat, to the kernel's tick (USER_HZ, 100 on Linux).
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count the
	// fields after its closing parenthesis (state is the first).
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name, want >= 13", pid, len(f))
	}
	var ticks uint64
	for _, v := range f[11:13] { // utime, stime
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	const userHZ = 100
	return time.Duration(ticks) * (time.Second / userHZ), nil
}

// cpusBusy returns the time cpus spent busy or stolen since boot, from
// /proc/stat (user, nice, system, irq, softirq and steal), to the kernel's
// tick.
func cpusBusy(cpus []int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	want := map[string]bool{}
	for _, c := range cpus {
		want["cpu"+strconv.Itoa(c)] = true
	}
	var ticks uint64
	found := 0
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !want[f[0]] {
			continue
		}
		found++
		for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system (idle iowait) irq softirq steal
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/stat %s: %w", f[0], err)
			}
			ticks += n
		}
	}
	if found != len(cpus) {
		return 0, fmt.Errorf("/proc/stat: %d of CPUs %v found", found, cpus)
	}
	const userHZ = 100
	return time.Duration(ticks) * (time.Second / userHZ), nil
}

// processSyscalls returns the read and write system calls process pid
// made since it started, from /proc/PID/io (syscr, syscw).
func processSyscalls(pid int) (reads, writes int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, ":")
		var dst *int64
		switch k {
		case "syscr":
			dst = &reads
		case "syscw":
			dst = &writes
		default:
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/io %s: %w", pid, k, err)
		}
		*dst = n
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("/proc/%d/io: no syscr and syscw", pid)
	}
	return reads, writes, nil
}
