package redisbench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/levee-go/levee/internal/redistest"
	"github.com/levee-go/levee/redislimit"
)

// The fleet: three replicas share one limit of fleetRate calls/s on one
// tenant; the load offered is twice that, split 80/10/10 for one phase and
// 10/10/80 for the next.
const (
	fleetRate  = 1000
	fleetBurst = 100
	offered    = 2 * fleetRate
	window     = 3 * time.Second
	phase      = 2 * window
)

var splits = [][3]float64{{0.8, 0.1, 0.1}, {0.1, 0.1, 0.8}}

// TestFleetAccuracy runs the fleet in direct mode and with leases, and
// checks that in every window the fleet admits within ±5% of the limit;
// with leases, that Redis sees at least 10× fewer commands than calls.
// It takes about 25 s and is not part of levee's `make test`.
func TestFleetAccuracy(t *testing.T) {
	srv := redistest.Start(t)
	var table strings.Builder
	fmt.Fprintf(&table, "%-8s %-8s %8s %8s %9s %9s\n", "mode", "window", "admitted", "per s", "of limit", "calls")
	for _, mode := range []string{"direct", "leased"} {
		var opts []redislimit.Option
		if mode == "leased" {
			opts = append(opts, redislimit.WithLeases(100*time.Millisecond, time.Second))
		}
		fleet := newFleet(t, srv, "fleet-"+mode, opts...)
		before := scripts(srv)
		admitted, calls := drive(fleet)
		commands := scripts(srv) - before
		var total int64
		for w, n := range admitted {
			rate := float64(n) / window.Seconds()
			fmt.Fprintf(&table, "%-8s %-8d %8d %8.0f %8.1f%% %9d\n", mode, w, n, rate, 100*rate/fleetRate, calls[w])
			if rate < 0.95*fleetRate || rate > 1.05*fleetRate {
				t.Errorf("%s, window %d: admitted %.0f/s, want within ±5%% of %d", mode, w, rate, fleetRate)
			}
			total += calls[w]
		}
		ratio := float64(total) / float64(max(commands, 1))
		fmt.Fprintf(&table, "%-8s %d calls, %d scripts run by Redis (heartbeats included): %.1f calls per command\n", mode, total, commands, ratio)
		if mode == "leased" && ratio < 10 {
			t.Errorf("leased: %.1f calls per Redis command, want >= 10", ratio)
		}
		for i, l := range fleet {
			st := l.Stats()
			if st.Errors > 0 || st.LocalAllowed+st.LocalRefused > 0 {
				t.Errorf("%s: replica %d fell back: %+v", mode, i, st)
			}
		}
	}
	t.Logf("fleet of 3, limit %d/s, offered %d/s split 80/10/10 then 10/10/80, %v windows:\n%s", fleetRate, offered, window, table.String())
}

// newFleet returns 3 limiters of the limit name, each with its own client
// to srv, once their heartbeats count 3 replicas; they are closed when the
// test ends.
func newFleet(t *testing.T, srv *redistest.Server, name string, opts ...redislimit.Option) []*redislimit.Limiter {
	t.Helper()
	fleet := make([]*redislimit.Limiter, 3)
	for i := range fleet {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		l, err := redislimit.New(c, name, fleetRate, fleetBurst, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		fleet[i] = l
	}
	for fleet[0].Replicas() != 3 {
		time.Sleep(10 * time.Millisecond)
	}
	return fleet
}

// scripts returns how many scripts (EVALSHA and EVAL) Redis has run.
func scripts(s *redistest.Server) int {
	return s.CommandCalls("evalsha") + s.CommandCalls("eval")
}

// drive offers the fleet the load of splits, open loop (arrivals on a
// schedule whether or not earlier calls returned), and returns the calls
// admitted and offered in each window.
func drive(fleet []*redislimit.Limiter) (admitted, calls []int64) {
	windows := int(time.Duration(len(splits)) * phase / window)
	adm := make([]atomic.Int64, windows)
	off := make([]atomic.Int64, windows)
	start := time.Now()
	var wg sync.WaitGroup
	for p, split := range splits {
		for r, l := range fleet {
			rate := split[r] * offered
			const lanes = 4
			for lane := range lanes {
				wg.Go(func() {
					t0 := start.Add(time.Duration(p) * phase)
					every := time.Duration(float64(time.Second) * lanes / rate)
					next := t0.Add(time.Duration(lane) * every / lanes)
					for next.Before(t0.Add(phase)) {
						if d := time.Until(next); d > 0 {
							time.Sleep(d)
						}
						w := int(time.Since(start) / window)
						if w >= windows {
							return
						}
						off[w].Add(1)
						if l.Allow(context.Background(), "tenant").Allowed {
							adm[w].Add(1)
						}
						next = next.Add(every)
					}
				})
			}
		}
	}
	wg.Wait()
	admitted, calls = make([]int64, windows), make([]int64, windows)
	for i := range windows {
		admitted[i], calls[i] = adm[i].Load(), off[i].Load()
	}
	return admitted, calls
}
