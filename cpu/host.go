package cpu

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/levee-go/levee/internal/sysfile"
)

// userHZ is the unit of /proc/stat (USER_HZ, 100 on every Linux ABI).
const userHZ = 100

// NewHost returns the host source, the last resort: the busy time (all
// but idle and iowait) of the CPUs in this process's affinity mask, from
// the per-CPU lines of /proc/stat, against the number of those CPUs. It
// measures every process running there, not only this one. Its Usage
// grows by what each CPU did between two samples that both find it in
// the mask, so that a CPU which joins the mask (taskset, a cpuset
// resized, a CPU back online) adds what it does from then on, not its
// busy time since boot, and one that leaves takes nothing away. CPU
// pressure is /proc/pressure/cpu when present. root is as for
// [NewCgroupV2].
func NewHost(root string) (Source, error) {
	s, err := newHost(sysfile.CleanRoot(root), defaultEnv())
	if err != nil {
		return nil, err
	}
	return s, nil
}

type host struct {
	files     sysfile.Files // the files it samples, kept open (package sysfile)
	env       sysenv
	stat, psi string

	// The counters, under mu: one sample at a time, so that the samples'
	// times and their Usage grow in the same order.
	mu   sync.Mutex
	prev map[int]uint64 // busy ticks of each CPU of the mask at the last sample
	next map[int]uint64 // this sample's, then swapped with prev
	busy uint64         // busy ticks at the first sample, plus the growth since, CPU by CPU
}

func newHost(root string, env sysenv) (*host, error) {
	s := &host{env: env, stat: filepath.Join(root, procStat), psi: filepath.Join(root, procPressure),
		prev: map[int]uint64{}, next: map[int]uint64{}}
	if _, err := s.Sample(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *host) Sample() (Sample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cpus, err := s.env.cpus()
	if err != nil {
		return Sample{}, err
	}
	data, err := s.files.ReadFile(s.stat)
	now := s.env.now()
	if err != nil {
		return Sample{}, fmt.Errorf("cpu: host: %w", err)
	}
	want := make(map[int]bool, len(cpus))
	for _, c := range cpus {
		want[c] = true
	}
	clear(s.next)
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "cpu") || strings.HasPrefix(line, "cpu ") {
			continue
		}
		f := strings.Fields(line)
		id, err := strconv.Atoi(f[0][3:])
		if err != nil || len(f) < 5 {
			return Sample{}, fmt.Errorf("cpu: host: %w", parse.Errorf("line %q", s.stat, line))
		}
		if !want[id] {
			continue
		}
		// user nice system idle iowait irq softirq steal (guest is in user)
		var busy uint64
		for i, v := range f[1:] {
			if i >= 8 {
				break
			}
			x, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return Sample{}, fmt.Errorf("cpu: host: %w", parse.Errorf("line %q", s.stat, line))
			}
			if i != 3 && i != 4 {
				busy += x
			}
		}
		s.next[id] = busy
	}
	if len(s.next) == 0 {
		return Sample{}, fmt.Errorf("cpu: host: %w", parse.Errorf("has no line for CPUs %v", s.stat, cpus))
	}
	// What each CPU did since the last sample, if it was in the mask
	// then too (a counter that went back adds nothing); at the first
	// sample (none before has a CPU), all they did since boot.
	first := len(s.prev) == 0
	for id, busy := range s.next {
		if p, ok := s.prev[id]; first || (ok && busy > p) {
			s.busy += busy - p
		}
	}
	s.prev, s.next = s.next, s.prev
	smp := Sample{
		Time:      now,
		Usage:     time.Duration(s.busy) * (time.Second / userHZ),
		Allowance: float64(len(s.prev)),
	}
	smp.Pressure, smp.HasPressure = readPressure(&s.files, s.psi)
	return smp, nil
}

func (s *host) String() string {
	return "host " + s.stat + " (every process on the CPUs of the affinity mask)"
}
