package redisbench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/redistest"
	"github.com/levee-go/levee/redislimit"
)

// TestFleetOutage kills the redis-server under a leased fleet of 3 for a
// few seconds, the load split evenly, and checks that the fleet's rate
// stays within ±20% of the limit through the outage (each replica falls
// back to a third of it), that no call waits more than one timeout, and
// that the fleet is back on the shared limit within 2 s of the restart.
// It takes about 10 s and is not part of levee's `make test`.
func TestFleetOutage(t *testing.T) {
	srv := redistest.Start(t)
	fleet := newFleet(t, srv, "outage", redislimit.WithLeases(100*time.Millisecond, time.Second))
	const seconds = 9 // 3 s up, 3 s down, 3 s up again
	var admitted, local [seconds]atomic.Int64
	var slowest atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for _, l := range fleet {
		const lanes = 4
		for lane := range lanes {
			wg.Go(func() {
				every := time.Duration(float64(time.Second) * lanes * 3 / offered)
				next := start.Add(time.Duration(lane) * every / lanes)
				for {
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
					s := int(time.Since(start) / time.Second)
					if s >= seconds {
						return
					}
					t0 := time.Now()
					r := l.Allow(context.Background(), "tenant")
					if d := int64(time.Since(t0)); d > slowest.Load() {
						slowest.Store(d)
					}
					if r.Allowed {
						admitted[s].Add(1)
						if r.Local {
							local[s].Add(1)
						}
					}
					next = next.Add(every)
				}
			})
		}
	}
	time.Sleep(time.Until(start.Add(3 * time.Second)))
	srv.Stop()
	time.Sleep(time.Until(start.Add(6 * time.Second)))
	srv.Restart()
	restarted := time.Now()
	var back time.Duration
	for {
		st := fleet[0].Stats()
		if st.Breaker.String() == "closed" && st.Heartbeats > 0 {
			if r := fleet[0].Allow(context.Background(), "probe"); !r.Local {
				back = time.Since(restarted)
				break
			}
		}
		if time.Since(restarted) > 3*time.Second {
			back = -1
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	var table strings.Builder
	fmt.Fprintf(&table, "%-6s %-6s %9s %9s\n", "second", "redis", "admitted", "of which local")
	for s := range seconds {
		state := "up"
		if s >= 3 && s < 6 {
			state = "down"
		}
		fmt.Fprintf(&table, "%-6d %-6s %9d %9d\n", s, state, admitted[s].Load(), local[s].Load())
	}
	t.Logf("leased fleet of 3, limit %d/s, offered %d/s evenly; back on the shared limit %v after the restart; slowest call %v\n%s",
		fleetRate, offered, back, time.Duration(slowest.Load()), table.String())
	var down int64
	for s := 3; s < 6; s++ {
		down += admitted[s].Load()
	}
	if rate := float64(down) / 3; rate < 0.8*fleetRate || rate > 1.2*fleetRate {
		t.Errorf("fleet rate with Redis down = %.0f/s, want within ±20%% of %d", rate, fleetRate)
	}
	if back < 0 || back > 2*time.Second {
		t.Errorf("back on the shared limit %v after the restart, want within 2s", back)
	}
	if d := time.Duration(slowest.Load()); d > 2*redislimit.DefaultTimeout {
		t.Errorf("slowest call %v, want within about one timeout (%v)", d, redislimit.DefaultTimeout)
	}
}
