package redistest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServerStopRestart(t *testing.T) {
	s := Start(t)
	if got := s.Do("SET", "k", "v"); got != "OK" {
		t.Fatalf("SET k v = %q, want OK", got)
	}
	if got := s.Do("GET", "k"); got != "v" {
		t.Fatalf("GET k = %q, want v", got)
	}
	s.Stop()
	if err := Ping(s.Addr()); err == nil {
		t.Fatalf("Ping(%s) after Stop = nil, want an error", s.Addr())
	}
	s.Stop() // a second Stop does nothing
	s.Restart()
	if err := Ping(s.Addr()); err != nil {
		t.Fatalf("Ping(%s) after Restart = %v, want nil", s.Addr(), err)
	}
	if got := s.Do("GET", "k"); got != "" {
		t.Fatalf("GET k after Restart = %q, want empty (no persistence)", got)
	}
	s.Do("GET", "k")
	if n := s.CommandCalls("get"); n != 2 {
		t.Fatalf("CommandCalls(get) = %d, want 2", n)
	}
}

// TestMissingBinaryFails runs this test binary again with an empty PATH:
// a test that needs redis-server must fail with the install message, not
// skip.
func TestMissingBinaryFails(t *testing.T) {
	if os.Getenv("REDISTEST_CHILD") == "1" {
		Start(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMissingBinaryFails$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REDISTEST_CHILD=1", "PATH=")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("child with no redis-server in PATH passed, want a failure; output:\n%s", out)
	}
	if !strings.Contains(string(out), Install) || strings.Contains(string(out), "SKIP") {
		t.Fatalf("child output lacks the install message (or skipped):\n%s", out)
	}
}

func TestProxyLatency(t *testing.T) {
	s := Start(t)
	p := NewProxy(t, s.Addr())
	if err := Ping(p.Addr()); err != nil {
		t.Fatalf("Ping through proxy = %v", err)
	}
	const d = 50 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	if err := Ping(p.Addr()); err != nil {
		t.Fatalf("Ping through slow proxy = %v", err)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("Ping through a proxy adding %v took %v, want at least that", d, took)
	}
	p.SetLatency(0)
	p.Close()
	if err := Ping(p.Addr()); err == nil {
		t.Fatal("Ping through a closed proxy = nil, want an error")
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.Nodes) != 3 {
		t.Fatalf("cluster of %d nodes, want 3", len(c.Nodes))
	}
	for i, info := range c.Do("CLUSTER", "INFO") {
		if !strings.Contains(info, "cluster_known_nodes:3") || !strings.Contains(info, "cluster_slots_assigned:16384") {
			t.Fatalf("node %d CLUSTER INFO:\n%s\nwant 3 known nodes and every slot assigned", i, info)
		}
	}
	if a, b := c.Slot("x:{tag}:1"), c.Slot("y:{tag}:2"); a != b {
		t.Fatalf("slots of keys sharing a hash tag: %d and %d, want equal", a, b)
	}
}
