package cpu

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/levee-go/levee/internal/sysfile"
)

// userHZ is the unit of /proc/stat (USER_HZ, 100 on every Linux ABI).
const userHZ = 100

// NewHost returns the host source, the last resort: the busy time (all
// but idle and iowait) of the CPUs in this process's affinity mask, from
// the per-CPU lines of /proc/stat, against the number of those CPUs. It
// measures every process running there, not only this one. CPU pressure
// is /proc/pressure/cpu when present. root is as for [NewCgroupV2].
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
}

func newHost(root string, env sysenv) (*host, error) {
	s := &host{env: env, stat: filepath.Join(root, procStat), psi: filepath.Join(root, procPressure)}
	if _, err := s.Sample(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *host) Sample() (Sample, error) {
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
	var busy uint64
	n := 0
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
		n++
	}
	if n == 0 {
		return Sample{}, fmt.Errorf("cpu: host: %w", parse.Errorf("has no line for CPUs %v", s.stat, cpus))
	}
	smp := Sample{
		Time:      now,
		Usage:     time.Duration(busy) * (time.Second / userHZ),
		Allowance: float64(n),
	}
	smp.Pressure, smp.HasPressure = readPressure(&s.files, s.psi)
	return smp, nil
}

func (s *host) String() string {
	return "host " + s.stat + " (every process on the CPUs of the affinity mask)"
}
