package main

import (
	"bufio"
	"context"
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

// placement is where the processes run: each server on one CPU with
// GOMAXPROCS=1, in a cgroup of one CPU when the machine allows, and the
// load generator (this process) on the other CPUs.
type placement struct {
	serverCPU int      // -1: servers not pinned
	taskset   string   // path of taskset; "" makes the server pin itself
	procs     []string // cgroup.procs files a server joins; nil: no cgroup
	note      string   // what the tables' notes say about it

	restore      func() // gives this process its CPUs back
	removeCgroup func()
}

// place pins this process to every allowed CPU but the first, which it
// leaves to the servers, and, if useCgroup, creates the servers' cgroup.
// What cannot be done is said in the note, never fatal.
func place(useCgroup bool) placement {
	p := placement{serverCPU: -1, restore: func() {}, removeCgroup: func() {}}
	var notes []string
	allowed, err := affinity.Allowed()
	switch {
	case err != nil:
		notes = append(notes, fmt.Sprintf("servers not pinned (%v)", err))
	case len(allowed) < 2:
		notes = append(notes, fmt.Sprintf("servers not pinned (only CPU %v: servers and load generator share it)", allowed))
	default:
		server, rest := allowed[0], allowed[1:]
		if err := affinity.Pin(rest); err != nil {
			notes = append(notes, fmt.Sprintf("servers not pinned (%v)", err))
			break
		}
		p.serverCPU = server
		p.restore = func() { _ = affinity.Pin(allowed) }
		how := "sched_setaffinity"
		if path, err := exec.LookPath("taskset"); err == nil {
			p.taskset, how = path, "taskset"
		}
		notes = append(notes, fmt.Sprintf("each server alone on CPU %d (%s) with GOMAXPROCS=1, load generator on CPUs %v", server, how, rest))
	}
	if useCgroup {
		if _, err := exec.LookPath("sh"); err != nil {
			notes = append(notes, fmt.Sprintf("no cgroup of its own (%v)", err))
		} else if procs, remove, err := newCgroup(fmt.Sprintf("levee-peers-%d", os.Getpid())); err != nil {
			notes = append(notes, fmt.Sprintf("no cgroup of its own (%v): CPU-based peers read the CPU of the whole machine", err))
		} else {
			p.procs, p.removeCgroup = procs, remove
			notes = append(notes, "in a cgroup of its own with a quota of one CPU, as in a one-CPU container, so that every CPU signal reads the server's own CPU")
		}
	} else {
		notes = append(notes, "no cgroup of its own (-cgroup=false): CPU-based peers read the CPU of the whole machine")
	}
	p.note = strings.Join(notes, "; ")
	return p
}

// server is an inventory server running in a child process.
type server struct {
	cmd      *exec.Cmd
	addr     string
	line     string
	workIter int
	exited   chan struct{}
	waitErr  error
}

// startServer starts this binary as the server spec describes, placed as
// p says, and waits until it listens.
func startServer(ctx context.Context, p placement, spec serverSpec, stderr io.Writer) (*server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	spec.PinCPU = -1
	argv := []string{exe}
	switch {
	case p.serverCPU >= 0 && p.taskset != "":
		argv = []string{p.taskset, "-c", strconv.Itoa(p.serverCPU), exe}
	case p.serverCPU >= 0:
		spec.PinCPU = p.serverCPU
	}
	if len(p.procs) > 0 {
		// Join the cgroup before exec, so that the server's packages see
		// their cgroup from their first instruction (aegis reads it in
		// an init function).
		var script strings.Builder
		for _, f := range p.procs {
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
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", env)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s server: %w", spec.Protection, err)
	}
	s := &server{cmd: cmd, exited: make(chan struct{})}
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
