// Package redisproc runs a redis-server process on a loopback port, with
// no persistence, stopped (SIGKILL, as a crash) and restarted on the same
// port at will, and talks to it in the few words of RESP it needs: no
// Redis client is imported (only redislimit imports one). The tests'
// helpers (internal/redistest) and the fleet demo (cmd/levee/internal/scenario/fleet)
// share it.
package redisproc

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
	"time"
)

// Install is the one-line message when redis-server is not in PATH.
const Install = "redis-server not found in PATH; install it with `apt-get install redis-server` (Debian/Ubuntu) or `brew install redis`"

// ErrNotFound reports that redis-server is not in PATH; its message is
// Install.
var ErrNotFound = errors.New(Install)

// startTimeout bounds how long a redis-server may take to answer PING.
const startTimeout = 10 * time.Second

// Binary returns the path of redis-server in PATH, or ErrNotFound.
func Binary() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", ErrNotFound
	}
	return bin, nil
}

// Process is one redis-server listening on 127.0.0.1, with no
// persistence. Create it with Start; the zero value is not usable. Its
// methods are safe for concurrent use.
type Process struct {
	bin  string
	dir  string
	port int
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil while stopped
	waited chan struct{} // closed when cmd has exited
}

// Start starts bin (a redis-server) on a free loopback port, trying a few
// ports in case one is taken before it binds, with dir as its working
// directory; extra arguments are given to redis-server as they are
// ("--cluster-enabled", "yes"). pick finds the ports; nil: FreePort.
// Stop it with Stop.
func Start(bin, dir string, pick func() (int, error), args ...string) (*Process, error) {
	if pick == nil {
		pick = FreePort
	}
	p := &Process{bin: bin, dir: dir, args: args}
	var err error
	for range 5 {
		if p.port, err = pick(); err != nil {
			return nil, err
		}
		if err = p.start(); err == nil {
			return p, nil
		}
	}
	return nil, err
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
func (p *Process) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	args := append([]string{
		"--port", strconv.Itoa(p.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", p.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	}, p.args...)
	cmd := exec.Command(p.bin, args...)
	out := new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %v", p.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(startTimeout)
	for {
		if err := Ping(p.Addr()); err == nil {
			p.cmd, p.waited = cmd, exited
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited: %s", p.port, strings.TrimSpace(out.String()))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %s", p.port, startTimeout, strings.TrimSpace(out.String()))
		}
	}
}

// Stop kills the server (SIGKILL: as a crash would) and waits for it to
// exit. Stopping a stopped server does nothing.
func (p *Process) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.waited
	p.cmd = nil
}

// Restart starts the server again on the same port, with an empty data
// set, after Stop; it retries for about a second while the port lingers.
// Restarting a running server does nothing.
func (p *Process) Restart() error {
	var err error
	for range 50 {
		if err = p.start(); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("restart: %w", err)
}

// Info returns the value of field in the given INFO section of the reply
// of the server at addr ("used_memory" in "memory"), or "" if absent.
func Info(addr, section, field string) (string, error) {
	r, err := Do(addr, "INFO", section)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(r, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && k == field {
			return v, nil
		}
	}
	return "", nil
}

// CommandCalls returns how many times the server at addr ran cmd (lower
// case: "evalsha") since it started or since CONFIG RESETSTAT, from INFO
// commandstats.
func CommandCalls(addr, cmd string) (int, error) {
	v, err := Info(addr, "commandstats", "cmdstat_"+cmd)
	if err != nil {
		return 0, err
	}
	for _, kv := range strings.Split(v, ",") {
		if n, ok := strings.CutPrefix(kv, "calls="); ok {
			c, err := strconv.Atoi(n)
			if err != nil {
				return 0, fmt.Errorf("INFO commandstats: %s: %v", v, err)
			}
			return c, nil
		}
	}
	return 0, nil
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
// returns its reply as text: a simple string, an error reply (as an
// error), an integer, a bulk string, or the elements of an array joined by
// newlines.
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
