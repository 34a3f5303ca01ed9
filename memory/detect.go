package memory

import (
	"errors"
	"strings"

	"github.com/levee-go/levee/internal/sysfile"
)

// DetectOption configures [Detect]. A nil DetectOption is ignored.
type DetectOption func(*detectOptions)

type detectOptions struct {
	root string
	env  *sysenv // nil: the real clock and runtime
}

// WithRoot makes [Detect] read /proc and /sys/fs/cgroup under root instead
// of "/" (for tests and for agents that see a host through a bind mount).
// Default "/".
func WithRoot(root string) DetectOption {
	return func(o *detectOptions) { o.root = sysfile.CleanRoot(root) }
}

// Detect chooses the source that measures the memory this process may
// use, trying in order:
//
//  1. cgroup v2, if the v2 hierarchy has the memory controller and the
//     process has a cgroup of its own ([NewCgroupV2]);
//  2. cgroup v1, if the process has a memory cgroup of its own
//     ([NewCgroupV1]);
//  3. the Go runtime alone ([NewRuntime]), whose only limit is
//     GOMEMLIMIT — chosen when the process sits in the root cgroup (no
//     container of its own; the root's counters cover the whole host) or
//     no cgroup is readable.
//
// Every source also reports the runtime's view. A cgroup whose files are
// missing or unreadable is skipped, not fatal; String of the chosen
// source says what is measured and, for the runtime source, why the
// cgroups were passed over. Detect fails only when the runtime source
// does (see [NewRuntime]).
func Detect(opts ...DetectOption) (Source, error) {
	o := detectOptions{root: "/"}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	var env sysenv
	if o.env != nil {
		env = *o.env
	} else {
		var err error
		if env, err = defaultEnv(); err != nil {
			return nil, err
		}
	}
	var why []string
	if v2HasMemory(o.root) {
		s, err := newCgroupV2(o.root, env)
		switch {
		case s != nil && s.isRoot:
			why = append(why, "cgroup v2: root cgroup")
		case err != nil:
			why = append(why, "cgroup v2 unreadable: "+err.Error())
		default:
			return s, nil
		}
	}
	s1, err := newCgroupV1(o.root, env)
	switch {
	case s1 != nil && s1.isRoot:
		why = append(why, "cgroup v1: root cgroup")
	case errors.Is(err, ErrNotMounted):
		why = append(why, "no cgroup v1 memory controller")
	case err != nil:
		why = append(why, "cgroup v1 unreadable: "+err.Error())
	default:
		return s1, nil
	}
	return &runtimeSource{env: env, reason: strings.Join(why, "; ")}, nil
}

// v2HasMemory reports whether a cgroup2 hierarchy is mounted with the memory
// controller available (not a hybrid host whose v2 tree has none).
func v2HasMemory(root string) bool { return parse.V2Has(root, "memory") }
