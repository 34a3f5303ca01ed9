// Package redistest starts real redis-server processes for tests: one
// instance on a free loopback port, stopped and restarted at will, and a
// TCP proxy that adds latency in front of it. It imports no Redis client:
// it speaks the few words of RESP it needs itself.
//
// A test that needs Redis fails — it never skips — when redis-server is not
// in PATH, with a one-line message saying how to install it, so that CI
// (whose .ci/run installs it) always runs these tests.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Install is the one-line message of a test that needs redis-server and
// does not find it.
const Install = "redistest: redis-server not found in PATH; install it with `apt-get install redis-server` (Debian/Ubuntu) or `brew install redis`"

// startTimeout bounds how long a redis-server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is one redis-server process listening on a loopback port, with
// no persistence. Create it with Start; the zero value is not usable. Its
// methods are safe for concurrent use.
type Server struct {
	tb   testing.TB
	bin  string
	dir  string
	port int
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil while stopped
	waited chan struct{} // closed when cmd has exited
}

// Start starts a redis-server on a free loopback port and stops it when
// the test ends. Extra arguments are given to redis-server as they are
// ("--cluster-enabled", "yes"). It fails tb when redis-server is missing
// (with the message Install) or does not come up.
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	return start(tb, FreePort, args)
}

// start starts a redis-server on a port that pick finds.
func start(tb testing.TB, pick func() (int, error), args []string) *Server {
	tb.Helper()
	bin := Binary(tb)
	s := &Server{tb: tb, bin: bin, dir: tb.TempDir(), args: args}
	var err error
	for range 5 { // a free port can be taken by someone else before we bind it
		s.port, err = pick()
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Binary returns the path of redis-server, or fails tb with the message
// Install.
func Binary(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatal(Install)
	}
	return bin
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	args := append([]string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	out := new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %v", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(startTimeout)
	for {
		if err := Ping(s.Addr()); err == nil {
			s.cmd, s.waited = cmd, exited
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, strings.TrimSpace(out.String()))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %s", s.port, startTimeout, strings.TrimSpace(out.String()))
		}
	}
}

// Stop kills the server (SIGKILL: as a crash would) and waits for it to
// exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.waited
	s.cmd = nil
}

// Restart starts the server again on the same port, with an empty data
// set, after Stop. It fails the test if the server does not come up.
func (s *Server) Restart() {
	s.tb.Helper()
	var err error
	for range 50 { // the port may linger for a moment after the kill
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.tb.Fatalf("redistest: restart: %v", err)
}

// Do sends one command to the server and returns its reply as text: a
// simple string, an error ("ERR ..." as an error), an integer, a bulk
// string, or the elements of an array joined by newlines. It fails the
// test on a connection error or an error reply.
func (s *Server) Do(args ...string) string {
	s.tb.Helper()
	r, err := Do(s.Addr(), args...)
	if err != nil {
		s.tb.Fatalf("redistest: %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// Ping sends PING to addr and reports an error unless it answers PONG.
func Ping(addr string) error {
	r, err := Do(addr, "PING")
	if err != nil {
		return err
	}
	if r != "PONG" {
		return fmt.Errorf("PING answered %q", r)
	}
	return nil
}

// Do sends one command to the Redis server at addr on a new connection and
// returns its reply as Server.Do does.
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unknown reply %q", line)
}

// Info returns the value of field in the given INFO section of the
// server's reply ("used_memory" in "memory"), or "" if absent.
func (s *Server) Info(section, field string) string {
	s.tb.Helper()
	for _, line := range strings.Split(s.Do("INFO", section), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && k == field {
			return v
		}
	}
	return ""
}

// CommandCalls returns how many times the server ran cmd (lower case:
// "evalsha") since it started or since CONFIG RESETSTAT, from INFO
// commandstats.
func (s *Server) CommandCalls(cmd string) int {
	s.tb.Helper()
	v := s.Info("commandstats", "cmdstat_"+cmd)
	for _, kv := range strings.Split(v, ",") {
		if n, ok := strings.CutPrefix(kv, "calls="); ok {
			c, err := strconv.Atoi(n)
			if err != nil {
				s.tb.Fatalf("redistest: INFO commandstats: %s: %v", v, err)
			}
			return c
		}
	}
	return 0
}
