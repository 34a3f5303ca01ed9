// Package redistest starts real redis-server processes for tests: one
// instance on a free loopback port, stopped and restarted at will, and a
// TCP proxy that adds latency in front of it. It imports no Redis client:
// the processes and the few words of RESP it needs are internal/redisproc's.
//
// A test that needs Redis fails — it never skips — when redis-server is not
// in PATH, with a one-line message saying how to install it, so that CI
// (whose .ci/run installs it) always runs these tests.
package redistest

import (
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/redisproc"
)

// Install is the one-line message of a test that needs redis-server and
// does not find it.
const Install = "redistest: " + redisproc.Install

// startTimeout bounds how long a cluster may take to be ok.
const startTimeout = 10 * time.Second

// Server is one redis-server process listening on a loopback port, with
// no persistence. Create it with Start; the zero value is not usable. Its
// methods are safe for concurrent use.
type Server struct {
	tb testing.TB
	p  *redisproc.Process
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
	p, err := redisproc.Start(Binary(tb), tb.TempDir(), pick, args...)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	s := &Server{tb: tb, p: p}
	tb.Cleanup(s.Stop)
	return s
}

// Binary returns the path of redis-server, or fails tb with the message
// Install.
func Binary(tb testing.TB) string {
	tb.Helper()
	bin, err := redisproc.Binary()
	if err != nil {
		tb.Fatal(Install)
	}
	return bin
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) { return redisproc.FreePort() }

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string { return s.p.Addr() }

// Stop kills the server (SIGKILL: as a crash would) and waits for it to
// exit. Stopping a stopped server does nothing.
func (s *Server) Stop() { s.p.Stop() }

// Restart starts the server again on the same port, with an empty data
// set, after Stop. It fails the test if the server does not come up.
func (s *Server) Restart() {
	s.tb.Helper()
	if err := s.p.Restart(); err != nil {
		s.tb.Fatalf("redistest: %v", err)
	}
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
func Ping(addr string) error { return redisproc.Ping(addr) }

// Do sends one command to the Redis server at addr on a new connection and
// returns its reply as Server.Do does.
func Do(addr string, args ...string) (string, error) { return redisproc.Do(addr, args...) }

// CommandCalls returns how many times the server ran cmd (lower case:
// "evalsha") since it started or since CONFIG RESETSTAT, from INFO
// commandstats.
func (s *Server) CommandCalls(cmd string) int {
	s.tb.Helper()
	n, err := redisproc.CommandCalls(s.Addr(), cmd)
	if err != nil {
		s.tb.Fatalf("redistest: %v", err)
	}
	return n
}
