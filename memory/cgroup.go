package memory

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/levee-go/levee/internal/sysfile"
)

// v1Unlimited: cgroup v1 reports "no limit" as the largest page-aligned
// counter (9223372036854771712 with 4 KiB pages, less with larger pages);
// any value at or above this (4 EiB) is no real limit.
const v1Unlimited = 1 << 62

// NewCgroupV2 returns the cgroup v2 source for this process, with the Go
// runtime's view: memory.current and memory.stat's inactive_file of the
// process's own cgroup (found through /proc/self/cgroup and
// /proc/self/mountinfo), the smallest memory.max and memory.high from
// that cgroup up to the mount's root, and memory.events; all re-read at
// every sample, so a resize is seen. root is the filesystem root ("" or
// "/" in production; tests pass a fixture tree).
//
// It takes a first sample and returns its error, which names the file
// that could not be read. In the root cgroup the counters cover every
// process on the host (and the kernel may not provide memory.current
// there); String says so, and [Detect] skips such a source.
func NewCgroupV2(root string) (Source, error) {
	env, err := defaultEnv()
	if err != nil {
		return nil, err
	}
	s, err := newCgroupV2(sysfile.CleanRoot(root), env)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// NewCgroupV1 returns the cgroup v1 source for this process, with the Go
// runtime's view: memory.usage_in_bytes and memory.stat's
// total_inactive_file of its own memory cgroup, the smallest
// memory.limit_in_bytes from that cgroup up to the mount's root and
// memory.stat's hierarchical_memory_limit, memory.failcnt and the
// oom_kill count of memory.oom_control. root is as for [NewCgroupV2].
func NewCgroupV1(root string) (Source, error) {
	env, err := defaultEnv()
	if err != nil {
		return nil, err
	}
	s, err := newCgroupV1(sysfile.CleanRoot(root), env)
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
	c, err := parse.V2(root, "memory.max")
	if err != nil {
		return nil, err
	}
	s := &cgroupV2{env: env, dir: c.Dir, top: c.Top, isRoot: c.IsRoot}
	if _, err := s.Sample(); err != nil {
		return s, err // located; Detect tells a root cgroup from a broken one
	}
	return s, nil
}

var (
	v2StatKeys   = []string{"inactive_file"}
	v2EventsKeys = []string{"high", "max", "oom", "oom_kill"}
)

func (s *cgroupV2) Sample() (Sample, error) {
	maxL, highL, err := v2Limits(&s.files, s.dir, s.top)
	if err != nil {
		return Sample{}, fmt.Errorf("memory: cgroup v2: %w", err)
	}
	usage, err := parse.Uint(&s.files, filepath.Join(s.dir, "memory.current"))
	if err != nil {
		return Sample{}, fmt.Errorf("memory: cgroup v2: %w", err)
	}
	var stat [1]uint64
	if _, err := parse.KV(&s.files, filepath.Join(s.dir, "memory.stat"), v2StatKeys, stat[:]); err != nil {
		return Sample{}, fmt.Errorf("memory: cgroup v2: %w", err)
	}
	var ev [4]uint64
	if _, err := parse.KV(&s.files, filepath.Join(s.dir, "memory.events"), v2EventsKeys, ev[:]); err != nil && !sysfile.NotExist(err) {
		return Sample{}, fmt.Errorf("memory: cgroup v2: %w", err)
	}
	rt := s.env.runtime()
	return Sample{
		Time:    s.env.now(),
		Kind:    KindCgroupV2,
		Runtime: rt,
		Cgroup: Cgroup{
			Usage:        usage,
			InactiveFile: stat[0],
			Max:          maxL,
			High:         highL,
			Events:       Events{High: ev[0], Max: ev[1], OOM: ev[2], OOMKill: ev[3]},
		},
	}, nil
}

func (s *cgroupV2) String() string {
	if s.isRoot {
		return "cgroup v2 " + s.dir + " (root cgroup: counts every process on the host)"
	}
	return "cgroup v2 " + s.dir
}

// v2Limits returns the smallest memory.max and memory.high from dir up to
// top; 0 when none is set. The files are absent in the root cgroup.
func v2Limits(files *sysfile.Files, dir, top string) (maxL, highL uint64, err error) {
	for d := dir; ; d = filepath.Dir(d) {
		for _, f := range [...]struct {
			name string
			to   *uint64
		}{{"memory.max", &maxL}, {"memory.high", &highL}} {
			v, err := readLimit(files, filepath.Join(d, f.name))
			switch {
			case sysfile.NotExist(err):
			case err != nil:
				return 0, 0, err
			default:
				*f.to = minLimit(*f.to, v)
			}
		}
		if d == top || len(d) <= len(top) || d == filepath.Dir(d) {
			return maxL, highL, nil
		}
	}
}

type cgroupV1 struct {
	files    sysfile.Files // the files it samples, kept open (package sysfile)
	env      sysenv
	dir, top string
	isRoot   bool
}

func newCgroupV1(root string, env sysenv) (*cgroupV1, error) {
	c, err := parse.V1(root, "memory")
	if err != nil {
		return nil, err
	}
	s := &cgroupV1{env: env, dir: c.Dir, top: c.Top, isRoot: c.IsRoot}
	if _, err := s.Sample(); err != nil {
		return s, err // located; Detect tells a root cgroup from a broken one
	}
	return s, nil
}

var v1StatKeys = []string{"total_inactive_file", "inactive_file", "hierarchical_memory_limit"}

func (s *cgroupV1) Sample() (Sample, error) {
	limit, err := v1Limit(&s.files, s.dir, s.top)
	if err != nil {
		return Sample{}, fmt.Errorf("memory: cgroup v1: %w", err)
	}
	usage, err := parse.Uint(&s.files, filepath.Join(s.dir, "memory.usage_in_bytes"))
	if err != nil {
		return Sample{}, fmt.Errorf("memory: cgroup v1: %w", err)
	}
	var stat [3]uint64
	found, err := parse.KV(&s.files, filepath.Join(s.dir, "memory.stat"), v1StatKeys, stat[:])
	if err != nil {
		return Sample{}, fmt.Errorf("memory: cgroup v1: %w", err)
	}
	inactive := stat[1]
	if found&1 != 0 {
		inactive = stat[0] // hierarchical, like usage_in_bytes
	}
	if found&4 != 0 && stat[2] < v1Unlimited {
		limit = minLimit(limit, stat[2])
	}
	var ev Events
	if n, err := parse.Uint(&s.files, filepath.Join(s.dir, "memory.failcnt")); err == nil {
		ev.Max = n
	}
	var oom [1]uint64
	if _, err := parse.KV(&s.files, filepath.Join(s.dir, "memory.oom_control"), []string{"oom_kill"}, oom[:]); err == nil {
		ev.OOMKill = oom[0]
	}
	rt := s.env.runtime()
	return Sample{
		Time:    s.env.now(),
		Kind:    KindCgroupV1,
		Runtime: rt,
		Cgroup:  Cgroup{Usage: usage, InactiveFile: inactive, Max: limit, Events: ev},
	}, nil
}

func (s *cgroupV1) String() string {
	if s.isRoot {
		return "cgroup v1 " + s.dir + " (root cgroup: counts every process on the host)"
	}
	return "cgroup v1 " + s.dir
}

// v1Limit returns the smallest memory.limit_in_bytes from dir up to top;
// 0 when none is set.
func v1Limit(files *sysfile.Files, dir, top string) (uint64, error) {
	var l uint64
	for d := dir; ; d = filepath.Dir(d) {
		name := filepath.Join(d, "memory.limit_in_bytes")
		data, err := files.ReadFile(name)
		switch {
		case sysfile.NotExist(err):
		case err != nil:
			return 0, err
		default:
			str := strings.TrimSpace(string(data))
			v, err := strconv.ParseInt(str, 10, 64) // -1 is written back as unlimited
			if err != nil {
				return 0, parse.Errorf("%q is not a number", name, str)
			}
			if v > 0 && v < v1Unlimited {
				l = minLimit(l, uint64(v))
			}
		}
		if d == top || len(d) <= len(top) || d == filepath.Dir(d) {
			return l, nil
		}
	}
}
