package redislimit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/levee-go/levee/internal/redistest"
)

// TestCluster runs the limiter against a Redis Cluster of 3 masters, with
// a rueidis client that finds the cluster from its nodes: buckets spread
// over the nodes, each on the slot of its hash tag; a burst is a burst;
// the scripts come back after SCRIPT FLUSH on every node; heartbeats
// count the replicas; leases work.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	beat := WithHeartbeat(20*time.Millisecond, 100*time.Millisecond)
	l := mustNew(t, c, "cl", 1, 3, beat)
	_ = mustNew(t, c, "cl", 1, 3, beat)
	ctx := context.Background()

	if got, want := cl.Slot(l.Key("acme")), cl.Slot("{acme}"); got != want {
		t.Fatalf("slot of %q = %d, want the slot of its tag, %d", l.Key("acme"), got, want)
	}
	for i := range 60 {
		if r := l.Allow(ctx, "tenant-"+strconv.Itoa(i)); !r.Allowed || r.Local {
			t.Fatalf("Allow(tenant-%d) = %+v, want allowed by the cluster", i, r)
		}
	}
	for i, n := range cl.Do("DBSIZE") {
		if n == "0" {
			t.Fatalf("node %d holds no key after 60 tenants, want buckets on every node", i)
		}
	}
	allowed := 0
	for range 10 {
		if r := l.Allow(ctx, "acme"); r.Local {
			t.Fatalf("Allow = %+v, want decided by the cluster", r)
		} else if r.Allowed {
			allowed++
		}
	}
	if allowed < 3 || allowed > 4 {
		t.Fatalf("allowed %d of 10 quick calls at 1/s with burst 3, want 3 (or 4)", allowed)
	}
	cl.Do("SCRIPT", "FLUSH")
	if r := l.Allow(ctx, "after-flush"); !r.Allowed || r.Local {
		t.Fatalf("Allow after SCRIPT FLUSH on every node = %+v, want allowed by the cluster", r)
	}
	if st := l.Stats(); st.Reloads == 0 || st.Errors != 0 {
		t.Fatalf("Stats = %+v, want reloads and no error", st)
	}
	eventually(t, 5*time.Second, "2 replicas from heartbeats on the cluster", func() bool { return l.Replicas() == 2 })

	leased := mustNew(t, c, "cl-leased", 1000, 100, quiet, WithLeases(50*time.Millisecond, time.Second))
	for i := range 200 {
		if r := leased.Allow(ctx, "tenant-"+strconv.Itoa(i%20)); !r.Allowed || r.Local {
			t.Fatalf("leased Allow #%d = %+v, want allowed from a lease", i, r)
		}
	}
	if st := leased.Stats(); st.Leases != 20 || st.Refills < 20 {
		t.Fatalf("leased Stats = %+v, want 20 leases from >= 20 refills", st)
	}
}
