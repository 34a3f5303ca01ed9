package cpu

import (
	"errors"
	"fmt"
	"strings"

	"github.com/levee-go/levee/internal/sysfile"
)

// DetectOption configures [Detect]. A nil DetectOption is ignored.
type DetectOption func(*detectOptions)

type detectOptions struct {
	root string
	env  sysenv
}

// WithRoot makes [Detect] read /proc and /sys/fs/cgroup under root instead
// of "/" (for tests and for agents that see a host through a bind mount).
// Default "/".
func WithRoot(root string) DetectOption {
	return func(o *detectOptions) { o.root = sysfile.CleanRoot(root) }
}

// Detect chooses the source that measures the CPU this process may use,
// trying in order:
//
//  1. cgroup v2, if the v2 hierarchy has the cpu controller and the
//     process has a cgroup of its own ([NewCgroupV2]);
//  2. cgroup v1, if the process has a cpuacct cgroup of its own
//     ([NewCgroupV1]);
//  3. the process's own CPU time ([NewProcess]) — chosen when the process
//     sits in the root cgroup (no container of its own) or no cgroup is
//     readable, because cgroup and host counters would then measure every
//     process on the host;
//  4. the host's /proc/stat ([NewHost]), the last resort.
//
// A source whose files are missing or unreadable is skipped, not fatal;
// String of the chosen source says what is measured and why earlier
// candidates were passed over. Detect fails, with an error wrapping
// [ErrNoSource] and each candidate's error, only when none works.
func Detect(opts ...DetectOption) (Source, error) {
	o := detectOptions{root: "/", env: defaultEnv()}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	var why []string
	var errs []error
	skip := func(what string, err error) {
		why = append(why, what)
		if err != nil {
			errs = append(errs, err)
		}
	}

	if v2HasCPU(o.root) {
		s, err := newCgroupV2(o.root, o.env)
		switch {
		case err != nil:
			skip("cgroup v2 unreadable", err)
		case s.isRoot:
			skip("cgroup v2: root cgroup", nil)
		default:
			return s, nil
		}
	}
	s1, err := newCgroupV1(o.root, o.env)
	switch {
	case errors.Is(err, ErrNotMounted):
		skip("no cgroup v1 cpuacct", nil)
	case err != nil:
		skip("cgroup v1 unreadable", err)
	case s1.isRoot:
		skip("cgroup v1: root cgroup", nil)
	default:
		return s1, nil
	}
	p, err := newProcess(o.root, o.env, strings.Join(why, "; "))
	if err == nil {
		return p, nil
	}
	skip("process CPU time unavailable", err)
	h, err := newHost(o.root, o.env)
	if err == nil {
		return &detectedHost{h, strings.Join(why, "; ")}, nil
	}
	errs = append(errs, err)
	return nil, fmt.Errorf("%w: %w", ErrNoSource, errors.Join(errs...))
}

// v2HasCPU reports whether a cgroup2 hierarchy is mounted with the cpu
// controller available (not a hybrid host whose v2 tree has none).
func v2HasCPU(root string) bool { return parse.V2Has(root, "cpu") }

type detectedHost struct {
	*host
	reason string
}

func (d *detectedHost) String() string { return d.host.String() + " (" + d.reason + ")" }
