package scenario

import (
	"fmt"
	"io"

	"github.com/levee-go/levee/internal/harness/affinity"
)

// CPUPlan is where the demo's processes run: the server on one CPU, the
// load generator (this process) on the others. Create it with PlanCPUs;
// Restore undoes it.
type CPUPlan struct {
	// Server is the CPU for the server; -1: not pinned.
	Server int
	// Note says where things run, for the progress lines and the report.
	Note string

	allowed []int // CPUs this process could use before the plan
	pinned  bool  // this process was pinned and must be restored
	stderr  io.Writer
}

// PlanCPUs pins this process to all allowed CPUs but the last, which it
// leaves for the servers. With fewer than two CPUs, or where pinning is
// not possible, nothing is pinned and the note says so. A failure to
// restore is reported on stderr.
func PlanCPUs(stderr io.Writer) CPUPlan {
	p := CPUPlan{Server: -1, stderr: stderr}
	allowed, err := affinity.Allowed()
	if err != nil {
		p.Note = fmt.Sprintf("server not pinned (%v), GOMAXPROCS=1", err)
		return p
	}
	p.allowed = allowed
	if len(allowed) < 2 {
		p.Note = fmt.Sprintf("server not pinned (only CPU %v available: server and load generator share it), GOMAXPROCS=1", allowed)
		return p
	}
	server := allowed[len(allowed)-1]
	rest := allowed[:len(allowed)-1]
	if err := affinity.Pin(rest); err != nil {
		p.Note = fmt.Sprintf("server not pinned (%v), GOMAXPROCS=1", err)
		return p
	}
	p.Server, p.pinned = server, true
	p.Note = fmt.Sprintf("server pinned to CPU %d with GOMAXPROCS=1, load generator on CPUs %v", server, rest)
	return p
}

// Restore gives this process back all the CPUs it had.
func (p CPUPlan) Restore() {
	if p.pinned {
		if err := affinity.Pin(p.allowed); err != nil {
			fmt.Fprintf(p.stderr, "levee demo: restoring CPU affinity: %v\n", err)
		}
	}
}
