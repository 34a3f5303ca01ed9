package cpu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/levee-go/levee/internal/sysfile"
)

// NewProcess returns the source that measures this process alone: its
// CPU time (CLOCK_PROCESS_CPUTIME_ID) plus the run-queue delay of its
// threads (field 2 of /proc/self/task/*/schedstat), against its allowance
// (the cgroup quota of its own cgroup if one is found and readable, the CPUs of its
// affinity mask and GOMAXPROCS). Counting the run-queue delay makes a
// process that wants its CPUs but is kept off them by other processes read
// as busy, which is what load shedding needs; a busy process on another
// CPU does not change the reading. CPU pressure, when present, is the
// host's /proc/pressure/cpu. root is as for [NewCgroupV2].
//
// [Detect] chooses it when the process has no cgroup of its own (its
// cgroup is the root of the hierarchy), where cgroup and host counters
// measure everyone's CPU.
func NewProcess(root string) (Source, error) {
	s, err := newProcess(sysfile.CleanRoot(root), defaultEnv(), "")
	if err != nil {
		return nil, err
	}
	return s, nil
}

type process struct {
	files  sysfile.Files // the files it samples, kept open (package sysfile)
	env    sysenv
	tasks  string
	psi    string
	quota  func() (float64, error) // nil when no own cgroup quota applies
	reason string                  // why Detect chose it, for String

	mu     sync.Mutex
	primed bool
	prev   map[int]time.Duration // run delay per thread at the last sample
	next   map[int]time.Duration
	wait   time.Duration // cumulative run delay of all threads seen
}

func newProcess(root string, env sysenv, reason string) (*process, error) {
	s := &process{
		env:    env,
		tasks:  filepath.Join(root, procTasks),
		psi:    filepath.Join(root, procPressure),
		reason: reason,
		prev:   map[int]time.Duration{},
		next:   map[int]time.Duration{},
	}
	s.quota = ownQuota(root, &s.files)
	if _, err := s.Sample(); err != nil {
		return nil, err
	}
	return s, nil
}

// ownQuota finds the quota of the process's own cgroup (v2, else v1),
// read through files; nil when there is none to read.
func ownQuota(root string, files *sysfile.Files) func() (float64, error) {
	mounts, err := parse.Mounts(root)
	if err != nil {
		return nil
	}
	paths, err := parse.CgroupPaths(root)
	if err != nil {
		return nil
	}
	if m, ok := sysfile.FindMount(mounts, "cgroup2", ""); ok && paths.HasV2 && v2HasCPU(root) {
		if dir, top, isRoot, err := parse.CgroupDir(root, m, paths.V2); err == nil && !isRoot {
			return func() (float64, error) { return v2Quota(files, dir, top) }
		}
	}
	if m, ok := sysfile.FindMount(mounts, "cgroup", "cpu"); ok {
		if p, ok := paths.V1["cpu"]; ok {
			if dir, top, isRoot, err := parse.CgroupDir(root, m, p); err == nil && !isRoot {
				return func() (float64, error) { return v1Quota(files, dir, top) }
			}
		}
	}
	return nil
}

func (s *process) Sample() (Sample, error) {
	var quota float64
	if s.quota != nil {
		// Best effort: this source measures the process itself, and an
		// unreadable quota must not make it fail; the CPUs of the affinity
		// mask and GOMAXPROCS still bound the allowance.
		quota, _ = s.quota()
	}
	allow, err := s.env.allowance(quota)
	if err != nil {
		return Sample{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	usage, err := s.env.cputime()
	now := s.env.now()
	if err != nil {
		return Sample{}, err
	}
	if err := s.readWait(); err != nil {
		return Sample{}, err
	}
	smp := Sample{Time: now, Usage: usage, Wait: s.wait, Allowance: allow, Quota: quota}
	smp.Pressure, smp.HasPressure = readPressure(&s.files, s.psi)
	return smp, nil
}

// readWait adds the run-queue delay each thread accrued since the last
// sample to s.wait. Threads that exited since are forgotten; a thread seen
// for the first time counts from its start (it began after the last
// sample), except at the first sample, which only records.
func (s *process) readWait() error {
	d, err := os.Open(s.tasks)
	if err != nil {
		return fmt.Errorf("cpu: process: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("cpu: process: %w", err)
	}
	clear(s.next)
	var add time.Duration // s.wait moves only if every thread was read
	for _, n := range names {
		tid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		delay, err := s.readSchedstat(filepath.Join(s.tasks, n, "schedstat"))
		if threadGone(err) {
			continue // the thread exited meanwhile
		}
		if err != nil {
			return fmt.Errorf("cpu: process: %w", err)
		}
		s.next[tid] = delay
		if s.primed {
			if inc := delay - s.prev[tid]; inc > 0 {
				add += inc
			}
		}
	}
	s.wait += add
	s.prev, s.next = s.next, s.prev
	s.primed = true
	s.files.Forget() // the schedstat files of threads that exited
	return nil
}

// threadGone reports whether err says a thread's file is gone: not found
// (its directory went), or ESRCH (a file kept open on a thread that
// exited reads so).
func threadGone(err error) bool {
	return sysfile.NotExist(err) || errors.Is(err, syscall.ESRCH)
}

func (s *process) readSchedstat(name string) (time.Duration, error) {
	data, err := s.files.ReadFile(name)
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(data))
	if len(fields) < 2 {
		return 0, parse.Errorf("%q has no run-queue delay field", name, strings.TrimSpace(string(data)))
	}
	v, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		return 0, parse.Errorf("%q has no run-queue delay field", name, strings.TrimSpace(string(data)))
	}
	return time.Duration(v), nil
}

func (s *process) String() string {
	str := fmt.Sprintf("process %d CPU time", os.Getpid())
	if s.reason != "" {
		str += " (" + s.reason + ")"
	}
	return str
}
