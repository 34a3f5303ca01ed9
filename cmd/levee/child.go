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
)

// serverStartTimeout bounds how long the demo waits for a server process
// to print its listening line.
const serverStartTimeout = 15 * time.Second

// childServer is a `levee serve` running in its own process.
type childServer struct {
	cmd      *exec.Cmd
	grpcAddr string
	httpAddr string
	line     string        // the listening line it printed
	workIter string        // the SHA-256 rounds per Allocate it reported
	exited   chan struct{} // closed when the process has exited
	waitErr  error         // valid once exited is closed
}

// startServer starts `levee serve` with args in a child process with
// GOMAXPROCS=1, pinned to cpu when cpu >= 0, and waits until it listens.
func (c *cli) startServer(ctx context.Context, cpu int, args ...string) (*childServer, error) {
	full := append([]string{"serve", "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0"}, args...)
	if cpu >= 0 {
		full = append(full, "-cpu", strconv.Itoa(cpu))
	}
	cmd := exec.Command(c.exe, full...)
	cmd.Env = append(append(os.Environ(), "GOMAXPROCS=1"), c.childEnv...)
	cmd.Stderr = prefixWriter{w: c.stderr, prefix: "server: "}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("starting server: %w", err)
	}
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting server %s: %w", c.exe, err)
	}
	s := &childServer{cmd: cmd, exited: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		// Read the listening line, then drain stdout until the process
		// closes it, then reap the process.
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
				s.grpcAddr = v
			}
			if v, ok := strings.CutPrefix(f, "http="); ok {
				s.httpAddr = v
			}
			if v, ok := strings.CutPrefix(f, "work-iterations="); ok {
				s.workIter = v
			}
		}
		if s.grpcAddr == "" || s.httpAddr == "" || s.httpAddr == "off" {
			s.stop(0)
			return nil, fmt.Errorf("server printed an unexpected listening line %q", line)
		}
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("server exited before listening: %v", s.waitErr)
	case <-timer.C:
		s.stop(0)
		return nil, fmt.Errorf("server did not start listening within %v", serverStartTimeout)
	case <-ctx.Done():
		s.stop(0)
		return nil, ctx.Err()
	}
}

// stop asks the server to shut down gracefully and kills it if it has not
// exited within grace. It is safe to call more than once.
func (s *childServer) stop(grace time.Duration) {
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

// exitedCleanly reports whether the server has exited with status 0.
func (s *childServer) exitedCleanly() bool {
	select {
	case <-s.exited:
		var ee *exec.ExitError
		return s.waitErr == nil || (errors.As(s.waitErr, &ee) && ee.ExitCode() == 0)
	default:
		return false
	}
}
