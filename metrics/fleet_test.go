package metrics

import (
	"errors"
	"sync"
	"testing"

	"github.com/levee-go/levee/breaker"
)

// fakeFleet is a FleetSource whose stats a test sets.
type fakeFleet struct {
	mu sync.Mutex
	s  FleetStats
}

func (f *fakeFleet) FleetStats() FleetStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s
}

func (f *fakeFleet) set(s FleetStats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s = s
}

func TestFleet(t *testing.T) {
	f := &fakeFleet{s: FleetStats{
		RedisAllowed: 7, RedisRefused: 3, LeaseAllowed: 900, LocalAllowed: 40, LocalRefused: 5,
		Errors: 2, Reloads: 1, Breaker: breaker.StateClosed, Replicas: 3, Rate: 300, LocalRate: 100,
		Heartbeats: 12, HeartbeatFail: 4, Refills: 30, Dropped: 6, Leases: 2,
	}}
	r := newTestRegistry()
	if err := r.AddFleet("tenant", f); err != nil {
		t.Fatalf("AddFleet: %v", err)
	}
	want := map[string]string{
		`levee_fleet_decisions_total{name="tenant",result="admitted",source="redis"}`: "7",
		`levee_fleet_decisions_total{name="tenant",result="refused",source="redis"}`:  "3",
		`levee_fleet_decisions_total{name="tenant",result="admitted",source="lease"}`: "900",
		`levee_fleet_decisions_total{name="tenant",result="admitted",source="local"}`: "40",
		`levee_fleet_decisions_total{name="tenant",result="refused",source="local"}`:  "5",
		`levee_fleet_redis_up{name="tenant"}`:                                         "1",
		`levee_fleet_breaker_state{name="tenant",state="closed"}`:                     "1",
		`levee_fleet_breaker_state{name="tenant",state="open"}`:                       "0",
		`levee_fleet_breaker_state{name="tenant",state="half-open"}`:                  "0",
		`levee_fleet_breaker_state{name="tenant",state="forced-open"}`:                "0",
		`levee_fleet_breaker_state{name="tenant",state="disabled"}`:                   "0",
		`levee_fleet_replicas{name="tenant"}`:                                         "3",
		`levee_fleet_rate{name="tenant"}`:                                             "300",
		`levee_fleet_local_rate{name="tenant"}`:                                       "100",
		`levee_fleet_redis_errors_total{name="tenant"}`:                               "2",
		`levee_fleet_script_reloads_total{name="tenant"}`:                             "1",
		`levee_fleet_heartbeats_total{name="tenant",result="ok"}`:                     "12",
		`levee_fleet_heartbeats_total{name="tenant",result="error"}`:                  "4",
		`levee_fleet_lease_refills_total{name="tenant"}`:                              "30",
		`levee_fleet_lease_dropped_total{name="tenant"}`:                              "6",
		`levee_fleet_leases{name="tenant"}`:                                           "2",
	}
	checkSeries(t, scrape(t, r), want, "levee_")

	// Redis down: the breaker opens, the fallback decides, the replica
	// count falls back to what was last learned.
	f.set(FleetStats{LocalAllowed: 50, Breaker: breaker.StateOpen, Replicas: 3, Rate: 300, LocalRate: 100})
	got := scrape(t, r)
	for k, v := range map[string]string{
		`levee_fleet_redis_up{name="tenant"}`:                                         "0",
		`levee_fleet_breaker_state{name="tenant",state="open"}`:                       "1",
		`levee_fleet_breaker_state{name="tenant",state="closed"}`:                     "0",
		`levee_fleet_decisions_total{name="tenant",result="admitted",source="local"}`: "50",
	} {
		if got[k] != v {
			t.Errorf("with the breaker open: %s = %q, want %s", k, got[k], v)
		}
	}
}

func TestFleetFunc(t *testing.T) {
	r := newTestRegistry()
	calls := 0
	err := r.AddFleet("shared", FleetFunc(func() FleetStats {
		calls++
		return FleetStats{Replicas: 2, Breaker: breaker.StateHalfOpen}
	}))
	if err != nil {
		t.Fatalf("AddFleet: %v", err)
	}
	got := scrape(t, r)
	if calls != 1 {
		t.Errorf("FleetFunc called %d times by one scrape, want 1", calls)
	}
	if v := got[`levee_fleet_replicas{name="shared"}`]; v != "2" {
		t.Errorf("levee_fleet_replicas = %q, want 2", v)
	}
	if v := got[`levee_fleet_redis_up{name="shared"}`]; v != "0" {
		t.Errorf("levee_fleet_redis_up while half-open = %q, want 0", v)
	}
}

func TestAddFleetErrors(t *testing.T) {
	tests := []struct {
		name string
		give func(r *Registry) error
		want error
	}{
		{"nil source", func(r *Registry) error { return r.AddFleet("x", nil) }, ErrInvalid},
		{"nil func", func(r *Registry) error { return r.AddFleet("x", FleetFunc(nil)) }, ErrInvalid},
		{"empty name", func(r *Registry) error { return r.AddFleet("", &fakeFleet{}) }, ErrInvalid},
		{"duplicate", func(r *Registry) error {
			if err := r.AddFleet("x", &fakeFleet{}); err != nil {
				return err
			}
			return r.AddFleet("x", &fakeFleet{})
		}, ErrDuplicate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.give(newTestRegistry()); !errors.Is(err, tt.want) {
				t.Errorf("error = %v, want %v", err, tt.want)
			}
		})
	}
}
