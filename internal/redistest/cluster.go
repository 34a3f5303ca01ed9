package redistest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of redis-server processes on loopback ports,
// each a master with a share of the 16384 slots and no replica. Create it
// with StartCluster; it is stopped when the test ends.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts n redis-servers in cluster mode (n >= 3), joins
// them with `redis-cli --cluster create ... --cluster-yes`, and waits
// until every node reports cluster_state:ok. It fails tb when redis-server
// or redis-cli is missing (with the message Install) or the cluster does
// not form.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatal(Install)
	}
	c := &Cluster{}
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}
	for range n {
		c.Nodes = append(c.Nodes, start(tb, clusterPort, args))
	}
	create := []string{"--cluster", "create"}
	create = append(create, c.Addrs()...)
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, create...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(create, " "), err, out)
	}
	deadline := time.Now().Add(startTimeout)
	for _, s := range c.Nodes {
		for !strings.Contains(s.Do("CLUSTER", "INFO"), "cluster_state:ok") {
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster node %s not ok within %v:\n%s", s.Addr(), startTimeout, s.Do("CLUSTER", "INFO"))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, s := range c.Nodes {
		a = append(a, s.Addr())
	}
	return a
}

// Slot returns the cluster slot of key (CLUSTER KEYSLOT).
func (c *Cluster) Slot(key string) int {
	s := c.Nodes[0]
	s.tb.Helper()
	n, err := strconv.Atoi(s.Do("CLUSTER", "KEYSLOT", key))
	if err != nil {
		s.tb.Fatalf("redistest: CLUSTER KEYSLOT %q: %v", key, err)
	}
	return n
}

// Do sends a command to every node and returns their replies.
func (c *Cluster) Do(args ...string) []string {
	var r []string
	for _, s := range c.Nodes {
		r = append(r, s.Do(args...))
	}
	return r
}

// clusterPort returns a port free on 127.0.0.1, with the port 10000 above
// it (the cluster bus) free too.
func clusterPort() (int, error) {
	for range 100 {
		p := 20000 + rand.IntN(30000)
		if free(p) && free(p+10000) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port pair (p, p+10000) found")
}

func free(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
