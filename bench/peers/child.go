package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/levee-go/levee/internal/harness/affinity"
)

// serverStartTimeout bounds the wait for a server's listening line.
const serverStartTimeout = 15 * time.Second

// placement is where the processes run: each server on its own CPUs (one,
// unless the scenario says more) with GOMAXPROCS set to their number, in
// a cgroup of that many CPUs when the machine allows, and the load
// generator (this process) on the other CPUs.
type placement struct {
	allowed []int  // the CPUs this process may run on
	pinned  bool   // servers are pinned: at least two CPUs, and pinning works
	taskset string // path of taskset; "" makes the server pin itself
	note    string // what the tables' notes say about the one-CPU servers

	useCgroup bool
	cgroups   map[int]cgroup // by the servers' CPUs, created on first use
	cgName    string

	restore func() // gives this process its CPUs back
}

// cgroup is a cgroup for the servers: the cgroup.procs files a server
// joins (nil: none), or why there is none.
type cgroup struct {
	procs  []string
	remove func()
	err    error
}

// place pins this process to every allowed CPU but the first, which it
// leaves to the one-CPU servers. What cannot be done is said in the note,
// never fatal.
func place(useCgroup bool) *placement {
	p := &placement{restore: func() {}, useCgroup: useCgroup, cgroups: map[int]cgroup{},
		cgName: fmt.Sprintf("levee-peers-%d", os.Getpid())}
	var notes []string
	allowed, err := affinity.Allowed()
	switch {
	case err != nil:
		notes = append(notes, fmt.Sprintf("servers not pinned (%v)", err))
	case len(allowed) < 2:
		notes = append(notes, fmt.Sprintf("servers not pinned (only CPU %v: servers and load generator share it)", allowed))
	default:
		if err := affinity.Pin(allowed[1:]); err != nil {
			notes = append(notes, fmt.Sprintf("servers not pinned (%v)", err))
			break
		}
		p.allowed, p.pinned = allowed, true
		p.restore = func() { _ = affinity.Pin(allowed) }
		how := "sched_setaffinity"
		if path, err := exec.LookPath("taskset"); err == nil {
			p.taskset, how = path, "taskset"
		}
		notes = append(notes, fmt.Sprintf("each server alone on CPU %d (%s) with GOMAXPROCS=1, load generator on CPUs %v", allowed[0], how, allowed[1:]))
	}
	switch cg := p.cgroup(1); {
	case !useCgroup:
		notes = append(notes, "no cgroup of its own (-cgroup=false): CPU-based peers read the CPU of the whole machine")
	case cg.err != nil:
		notes = append(notes, fmt.Sprintf("no cgroup of its own (%v): CPU-based peers read the CPU of the whole machine", cg.err))
	default:
		notes = append(notes, "in a cgroup of its own with a quota of one CPU, as in a one-CPU container, so that every CPU signal reads the server's own CPU")
	}
	p.note = strings.Join(notes, "; ")
	return p
}

// cgroup returns the servers' cgroup of cpus CPUs, creating it on first
// use.
func (p *placement) cgroup(cpus int) cgroup {
	if !p.useCgroup {
		return cgroup{err: errors.New("-cgroup=false")}
	}
	if cg, ok := p.cgroups[cpus]; ok {
		return cg
	}
	var cg cgroup
	if _, err := exec.LookPath("sh"); err != nil {
		cg.err = err
	} else {
		cg.procs, cg.remove, cg.err = newCgroup(fmt.Sprintf("%s-%dcpu", p.cgName, cpus), cpus)
	}
	p.cgroups[cpus] = cg
	return cg
}

// removeCgroups removes the cgroups once no server is left in them.
func (p *placement) removeCgroups() {
	for _, cg := range p.cgroups {
		if cg.remove != nil {
			cg.remove()
		}
	}
}

// serverCPUs returns the CPUs of a server of cores CPUs: the first cores
// allowed ones (all of them if there are fewer); nil when servers are not
// pinned.
func (p *placement) serverCPUs(cores int) []int {
	if !p.pinned {
		return nil
	}
	return p.allowed[:min(cores, len(p.allowed))]
}

// enter pins this process for the servers of cores CPUs: to the CPUs they
// leave, or, when they leave none, to all of them (generator and server
// then share). It returns what the notes say about it.
func (p *placement) enter(cores int) string {
	cpus := p.serverCPUs(cores)
	if cpus == nil {
		return "servers not pinned"
	}
	rest := p.allowed[len(cpus):]
	shared := len(rest) == 0
	if shared {
		rest = p.allowed
	}
	if err := affinity.Pin(rest); err != nil {
		return fmt.Sprintf("load generator not re-pinned (%v)", err)
	}
	cg := "no cgroup of its own"
	if c := p.cgroup(cores); c.err == nil {
		cg = fmt.Sprintf("in a cgroup with a quota of %d CPUs", cores)
	}
	if shared {
		return fmt.Sprintf("each server on CPUs %v with GOMAXPROCS=%d, %s; the load generator shares them (no CPU is left)", cpus, cores, cg)
	}
	return fmt.Sprintf("each server on CPUs %v with GOMAXPROCS=%d, %s; load generator on CPUs %v", cpus, cores, cg, rest)
}

// server is an inventory server running in a child process.
type server struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser // the server reads commands (cmdSlow, cmdFast) from it
	addr     string
	line     string
	workIter int
	exited   chan struct{}
	waitErr  error
}

// startServer starts this binary as the server spec describes, placed as
// p says, and waits until it listens.
func startServer(ctx context.Context, p *placement, spec serverSpec, stderr io.Writer) (*server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cores := spec.cores()
	argv := []string{exe}
	spec.PinCPUs = nil
	switch cpus := p.serverCPUs(cores); {
	case cpus != nil && p.taskset != "":
		list := make([]string, len(cpus))
		for i, c := range cpus {
			list[i] = strconv.Itoa(c)
		}
		argv = []string{p.taskset, "-c", strings.Join(list, ","), exe}
	case cpus != nil:
		spec.PinCPUs = cpus
	}
	if cg := p.cgroup(cores); cg.err == nil {
		// Join the cgroup before exec, so that the server's packages see
		// their cgroup from their first instruction (aegis reads it in
		// an init function).
		var script strings.Builder
		for _, f := range cg.procs {
			fmt.Fprintf(&script, "echo $$ > '%s' && ", f)
		}
		script.WriteString(`exec "$@"`)
		argv = append([]string{"sh", "-c", script.String(), "sh"}, argv...)
	}
	env, err := spec.env()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", cores), env)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s server: %w", spec.Protection, err)
	}
	s := &server{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			if !sent && strings.HasPrefix(sc.Text(), listeningPrefix) {
				lines <- sc.Text()
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	timer := time.NewTimer(serverStartTimeout)
	defer timer.Stop()
	select {
	case line := <-lines:
		s.line = line
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "grpc="); ok {
				s.addr = v
			}
			if v, ok := strings.CutPrefix(f, "http="); ok {
				s.addr = v
			}
			if v, ok := strings.CutPrefix(f, "work-iterations="); ok {
				s.workIter, _ = strconv.Atoi(v)
			}
		}
		if s.addr == "" {
			s.stop()
			return nil, fmt.Errorf("%s server printed an unexpected line %q", spec.Protection, line)
		}
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("%s server exited before listening: %v", spec.Protection, s.waitErr)
	case <-timer.C:
		s.stop()
		return nil, fmt.Errorf("%s server did not listen within %v", spec.Protection, serverStartTimeout)
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
}

// command writes one command line to the server's stdin.
func (s *server) command(c string) error {
	_, err := io.WriteString(s.stdin, c+"\n")
	return err
}

// stop asks the server to stop, kills it if it has not exited within a
// second, and waits for it to exit: the next server gets its CPU free.
func (s *server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		_ = s.cmd.Process.Kill()
	}
	select {
	case <-s.exited:
	case <-time.After(time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}
