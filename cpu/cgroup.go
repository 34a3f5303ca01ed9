package cpu

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/levee-go/levee/internal/sysfile"
)

// NewCgroupV2 returns the cgroup v2 source for this process: usage_usec
// of cpu.stat in the process's own cgroup (found through
// /proc/self/cgroup and /proc/self/mountinfo) against the allowance, with
// the quota read from cpu.max in that cgroup and its ancestors (the
// smallest wins) at every sample. It also reports the cgroup's throttling
// counters and cpu.pressure. root is the filesystem root ("" or "/" in
// production; tests pass a fixture tree).
//
// It takes a first sample and returns its error, which names the file
// that could not be read. In the root cgroup the counters cover every
// process on the host; String says so, and [Detect] skips such a source.
func NewCgroupV2(root string) (Source, error) {
	s, err := newCgroupV2(sysfile.CleanRoot(root), defaultEnv())
	if err != nil {
		return nil, err
	}
	return s, nil
}

// NewCgroupV1 returns the cgroup v1 source for this process: cpuacct.usage
// of its own cpuacct cgroup against the allowance, with the quota from
// cpu.cfs_quota_us / cpu.cfs_period_us of its cpu cgroup and ancestors
// (the smallest wins) re-read at every sample, and the throttling counters
// of cpu.stat. CPU pressure, when present, is the host's
// /proc/pressure/cpu. root is as for [NewCgroupV2].
func NewCgroupV1(root string) (Source, error) {
	s, err := newCgroupV1(sysfile.CleanRoot(root), defaultEnv())
	if err != nil {
		return nil, err
	}
	return s, nil
}

type cgroupV2 struct {
	files    sysfile.Files // the files it samples, kept open (package sysfile)
	env      sysenv
	dir, top string
	isRoot   bool
}

func newCgroupV2(root string, env sysenv) (*cgroupV2, error) {
	c, err := parse.V2(root, "cpu.max")
	if err != nil {
		return nil, err
	}
	s := &cgroupV2{env: env, dir: c.Dir, top: c.Top, isRoot: c.IsRoot}
	if _, err := s.Sample(); err != nil {
		return nil, err
	}
	return s, nil
}

var v2StatKeys = []string{"usage_usec", "nr_periods", "nr_throttled", "throttled_usec"}

func (s *cgroupV2) Sample() (Sample, error) {
	quota, err := v2Quota(&s.files, s.dir, s.top)
	if err != nil {
		return Sample{}, fmt.Errorf("cpu: cgroup v2: %w", err)
	}
	allow, err := s.env.allowance(quota)
	if err != nil {
		return Sample{}, err
	}
	var vals [4]uint64
	name := filepath.Join(s.dir, "cpu.stat")
	found, err := parse.KV(&s.files, name, v2StatKeys, vals[:])
	now := s.env.now()
	if err != nil {
		return Sample{}, fmt.Errorf("cpu: cgroup v2: %w", err)
	}
	if found&1 == 0 {
		return Sample{}, fmt.Errorf("cpu: cgroup v2: %w", parse.Errorf("has no usage_usec line", name))
	}
	smp := Sample{
		Time:      now,
		Usage:     time.Duration(vals[0]) * time.Microsecond,
		Allowance: allow,
		Quota:     quota,
	}
	if found&0b1110 == 0b1110 {
		smp.HasThrottling = true
		smp.Throttling = Throttling{Periods: vals[1], Throttled: vals[2], ThrottledTime: time.Duration(vals[3]) * time.Microsecond}
	}
	smp.Pressure, smp.HasPressure = readPressure(&s.files, filepath.Join(s.dir, "cpu.pressure"))
	return smp, nil
}

func (s *cgroupV2) String() string {
	if s.isRoot {
		return "cgroup v2 " + s.dir + " (root cgroup: counts every process on the host)"
	}
	return "cgroup v2 " + s.dir
}

// v2Quota returns the smallest cpu.max quota, in CPUs, from dir up to top;
// 0 when none is set.
func v2Quota(files *sysfile.Files, dir, top string) (float64, error) {
	q := 0.0
	for d := dir; ; d = filepath.Dir(d) {
		name := filepath.Join(d, "cpu.max")
		data, err := files.ReadFile(name)
		switch {
		case sysfile.NotExist(err):
		case err != nil:
			return 0, err
		default:
			f := strings.Fields(string(data))
			if len(f) != 2 {
				return 0, parse.Errorf("%q is not \"quota period\"", name, strings.TrimSpace(string(data)))
			}
			if f[0] != "max" {
				quota, err1 := strconv.ParseFloat(f[0], 64)
				period, err2 := strconv.ParseFloat(f[1], 64)
				if err1 != nil || err2 != nil || quota <= 0 || period <= 0 {
					return 0, parse.Errorf("%q is not \"quota period\"", name, strings.TrimSpace(string(data)))
				}
				if c := quota / period; q == 0 || c < q {
					q = c
				}
			}
		}
		if d == top || len(d) <= len(top) || d == filepath.Dir(d) {
			return q, nil
		}
	}
}

type cgroupV1 struct {
	files   sysfile.Files // the files it samples, kept open (package sysfile)
	env     sysenv
	acctDir string // cpuacct cgroup
	cpuDir  string // cpu cgroup ("" when the cpu controller is not mounted)
	cpuTop  string
	isRoot  bool
	psi     string
}

func newCgroupV1(root string, env sysenv) (*cgroupV1, error) {
	acct, err := parse.V1(root, "cpuacct")
	if err != nil {
		return nil, err
	}
	s := &cgroupV1{env: env, acctDir: acct.Dir, isRoot: acct.IsRoot, psi: filepath.Join(root, procPressure)}
	// The cpu controller (quota, throttling) is optional: read again the
	// files V1 has just read, to find it when it is mounted.
	mounts, err := parse.Mounts(root)
	if err != nil {
		return nil, fmt.Errorf("cpu: cgroup v1: %w", err)
	}
	paths, err := parse.CgroupPaths(root)
	if err != nil {
		return nil, fmt.Errorf("cpu: cgroup v1: %w", err)
	}
	if cm, ok := sysfile.FindMount(mounts, "cgroup", "cpu"); ok {
		if cp, ok := paths.V1["cpu"]; ok {
			s.cpuDir, s.cpuTop, _, err = parse.CgroupDir(root, cm, cp)
			if err != nil {
				return nil, fmt.Errorf("cpu: cgroup v1: %w", err)
			}
		}
	}
	if _, err := s.Sample(); err != nil {
		return nil, err
	}
	return s, nil
}

var v1StatKeys = []string{"nr_periods", "nr_throttled", "throttled_time"}

func (s *cgroupV1) Sample() (Sample, error) {
	var quota float64
	if s.cpuDir != "" {
		var err error
		if quota, err = v1Quota(&s.files, s.cpuDir, s.cpuTop); err != nil {
			return Sample{}, fmt.Errorf("cpu: cgroup v1: %w", err)
		}
	}
	allow, err := s.env.allowance(quota)
	if err != nil {
		return Sample{}, err
	}
	usage, err := parse.Uint(&s.files, filepath.Join(s.acctDir, "cpuacct.usage"))
	now := s.env.now()
	if err != nil {
		return Sample{}, fmt.Errorf("cpu: cgroup v1: %w", err)
	}
	smp := Sample{Time: now, Usage: time.Duration(usage), Allowance: allow, Quota: quota}
	if s.cpuDir != "" {
		var vals [3]uint64
		if found, err := parse.KV(&s.files, filepath.Join(s.cpuDir, "cpu.stat"), v1StatKeys, vals[:]); err == nil && found == 0b111 {
			smp.HasThrottling = true
			smp.Throttling = Throttling{Periods: vals[0], Throttled: vals[1], ThrottledTime: time.Duration(vals[2])}
		}
	}
	smp.Pressure, smp.HasPressure = readPressure(&s.files, s.psi)
	return smp, nil
}

func (s *cgroupV1) String() string {
	if s.isRoot {
		return "cgroup v1 " + s.acctDir + " (root cgroup: counts every process on the host)"
	}
	return "cgroup v1 " + s.acctDir
}

// v1Quota returns the smallest cpu.cfs_quota_us / cpu.cfs_period_us, in
// CPUs, from dir up to top; 0 when none is set (quota -1).
func v1Quota(files *sysfile.Files, dir, top string) (float64, error) {
	q := 0.0
	for d := dir; ; d = filepath.Dir(d) {
		qname := filepath.Join(d, "cpu.cfs_quota_us")
		data, err := files.ReadFile(qname)
		switch {
		case sysfile.NotExist(err):
		case err != nil:
			return 0, err
		default:
			quota, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
			if err != nil {
				return 0, parse.Errorf("%q is not a number", qname, strings.TrimSpace(string(data)))
			}
			if quota > 0 {
				period, err := parse.Uint(files, filepath.Join(d, "cpu.cfs_period_us"))
				if err != nil {
					return 0, err
				}
				if period == 0 {
					return 0, parse.Errorf("period 0", filepath.Join(d, "cpu.cfs_period_us"))
				}
				if c := float64(quota) / float64(period); q == 0 || c < q {
					q = c
				}
			}
		}
		if d == top || len(d) <= len(top) || d == filepath.Dir(d) {
			return q, nil
		}
	}
}
