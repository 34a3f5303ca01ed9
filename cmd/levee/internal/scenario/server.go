package scenario

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
)

// serverStartTimeout bounds how long the demo waits for a server process
// to print its listening line.
const serverStartTimeout = 15 * time.Second

// ListeningPrefix starts the line `levee serve` prints once it accepts
// calls; StartServer reads the addresses from it.
const ListeningPrefix = "levee serve: listening"

// Server is a `levee serve` running in its own process. Create it with
// StartServer; Stop stops it.
type Server struct {
	// GRPCAddr and HTTPAddr are where it listens: gRPC, and /stats and
	// /metrics.
	GRPCAddr, HTTPAddr string
	// Line is the listening line it printed.
	Line string
	// WorkIterations is the SHA-256 rounds per Allocate it reported.
	WorkIterations string

	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has exited
	waitErr error         // valid once exited is closed
}

// StartServer starts `levee serve` (env.Exe) with args in a child process
// with GOMAXPROCS=1, pinned to cpu when cpu >= 0, and waits until it
// listens. Its stderr goes to env.Stderr, each line prefixed "server: ".
func StartServer(ctx context.Context, env Env, cpu int, args ...string) (*Server, error) {
	full := append([]string{"serve", "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0"}, args...)
	if cpu >= 0 {
		full = append(full, "-cpu", strconv.Itoa(cpu))
	}
	cmd := exec.Command(env.Exe, full...)
	cmd.Env = append(append(os.Environ(), "GOMAXPROCS=1"), env.ChildEnv...)
	cmd.Stderr = prefixWriter{w: env.Stderr, prefix: "server: "}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("starting server: %w", err)
	}
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting server %s: %w", env.Exe, err)
	}
	s := &Server{cmd: cmd, exited: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		// Read the listening line, then drain stdout until the process
		// closes it, then reap the process.
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			if !sent && strings.HasPrefix(sc.Text(), ListeningPrefix) {
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
		s.Line = line
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "grpc="); ok {
				s.GRPCAddr = v
			}
			if v, ok := strings.CutPrefix(f, "http="); ok {
				s.HTTPAddr = v
			}
			if v, ok := strings.CutPrefix(f, "work-iterations="); ok {
				s.WorkIterations = v
			}
		}
		if s.GRPCAddr == "" || s.HTTPAddr == "" || s.HTTPAddr == "off" {
			s.Stop(0)
			return nil, fmt.Errorf("server printed an unexpected listening line %q", line)
		}
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("server exited before listening: %v", s.waitErr)
	case <-timer.C:
		s.Stop(0)
		return nil, fmt.Errorf("server did not start listening within %v", serverStartTimeout)
	case <-ctx.Done():
		s.Stop(0)
		return nil, ctx.Err()
	}
}

// Stop asks the server to shut down gracefully and kills it if it has not
// exited within grace. It is safe to call more than once.
func (s *Server) Stop(grace time.Duration) {
	select {
	case <-s.exited:
		return
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		_ = s.cmd.Process.Kill()
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-s.exited:
	case <-timer.C:
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Signal sends sig to the server's process; SIGTERM (or SIGINT) asks it
// to stop gracefully, as Stop does, without waiting.
func (s *Server) Signal(sig os.Signal) error {
	return s.cmd.Process.Signal(sig)
}

// ExitedCleanly reports whether the server has exited with status 0.
func (s *Server) ExitedCleanly() bool {
	select {
	case <-s.exited:
		var ee *exec.ExitError
		return s.waitErr == nil || (errors.As(s.waitErr, &ee) && ee.ExitCode() == 0)
	default:
		return false
	}
}

// Err returns how the process exited: nil before it has, or if it exited
// with status 0.
func (s *Server) Err() error {
	select {
	case <-s.exited:
		return s.waitErr
	default:
		return nil
	}
}

// RSS returns the server process's resident set size in bytes (VmRSS of
// /proc/PID/status), 0 once it has exited or where /proc does not say.
func (s *Server) RSS() uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// FDs returns how many files the server process has open (the entries of
// /proc/PID/fd), -1 once it has exited or where /proc does not say.
func (s *Server) FDs() int {
	es, err := os.ReadDir("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/fd")
	if err != nil {
		return -1
	}
	return len(es)
}
