package metrics

import (
	"errors"
	"sync/atomic"
	"testing"
)

// fakePolicy is a PolicySource whose counts the test sets.
type fakePolicy struct {
	ok, failed atomic.Uint64
	hash       atomic.Uint64
}

func (p *fakePolicy) Reloads() (uint64, uint64) { return p.ok.Load(), p.failed.Load() }
func (p *fakePolicy) Hash() uint64              { return p.hash.Load() }

func TestAddPolicy(t *testing.T) {
	r := newTestRegistry()
	p := &fakePolicy{}
	p.hash.Store(0xabcdef012345)
	if err := r.AddPolicy(p); err != nil {
		t.Fatalf("AddPolicy: %v", err)
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_policy_reload_total{result="ok"}`:    "0",
		`levee_policy_reload_total{result="error"}`: "0",
		`levee_policy_hash`:                         "1.88900966474565e+14",
	}, "levee_policy_")
	p.ok.Add(3)
	p.failed.Add(2)
	p.hash.Store(7)
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_policy_reload_total{result="ok"}`:    "3",
		`levee_policy_reload_total{result="error"}`: "2",
		`levee_policy_hash`:                         "7",
	}, "levee_policy_")
	if err := r.AddPolicy(&fakePolicy{}); !errors.Is(err, ErrDuplicate) {
		t.Errorf("second AddPolicy: err = %v, want ErrDuplicate", err)
	}
	if err := r.AddPolicy(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddPolicy(nil): err = %v, want ErrInvalid", err)
	}
	var nilPolicy *fakePolicy
	if err := r.AddPolicy(nilPolicy); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddPolicy(nil *fakePolicy): err = %v, want ErrInvalid", err)
	}
}
