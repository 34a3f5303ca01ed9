package breaker

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// model is a plain, sequential restatement of the documented state machine
// (count window): slices and recounts instead of packed atomics. A half-open
// generation ends at its deadline: the model opens at that instant (not when
// it is next asked), and a probe that ends at or after it is late. A permit
// finished twice counts once. With every > 0, one call in every asked of
// an open generation is a probe, and the first that ends as a success (not
// failed, not slow) moves it to half-open at its end.
type model struct {
	size, minCalls, probes int
	every                  int
	rate, slowRate         float64
	slowT, wait, growMax   time.Duration
	grow                   float64
	maxHalfOpen            time.Duration

	state   State
	gen     int
	window  []rec // closed: last size calls; half-open: finished probes
	issued  int   // half-open permits out
	asked   int   // open: calls asked
	trickle int   // open → half-open through a probe of the trickle
	until   time.Duration
	trips   int
	changes int
	closes  int // half-open → closed

	late, duplicates int
	lateProbes       int // probes late because they ended after the deadline
}

type rec struct{ fail, slow bool }

func (m *model) exceeded(calls []rec) bool {
	f, s := 0, 0
	for _, c := range calls {
		if c.fail {
			f++
		}
		if c.slow {
			s++
		}
	}
	n := float64(len(calls))
	return float64(f)*100 >= m.rate*n || float64(s)*100 >= m.slowRate*n
}

func (m *model) enter(s State, now time.Duration) {
	m.gen++
	if s != m.state {
		m.changes++
	}
	m.state, m.window, m.issued, m.asked = s, nil, 0, 0
	switch s {
	case StateClosed:
		m.trips = 0
		if m.gen > 1 {
			m.closes++
		}
	case StateOpen:
		m.trips++
		w := m.wait
		for range m.trips - 1 {
			w = min(time.Duration(float64(w)*m.grow), m.growMax)
		}
		m.until = now + min(w, m.growMax)
	case StateHalfOpen:
		m.until = now + m.maxHalfOpen
	}
}

func (m *model) allow(now time.Duration) (int, error) {
	if m.state == StateOpen && now >= m.until {
		m.enter(StateHalfOpen, now)
	}
	if m.state == StateHalfOpen && now >= m.until {
		m.enter(StateOpen, m.until)
	}
	switch m.state {
	case StateOpen:
		if m.every > 0 {
			m.asked++
			if m.asked%m.every == 0 {
				return m.gen, nil
			}
		}
		return 0, ErrOpen
	case StateHalfOpen:
		if m.issued == m.probes {
			return 0, ErrTooManyCalls
		}
		m.issued++
	}
	return m.gen, nil
}

func (m *model) done(gen int, err error, d, end time.Duration) {
	if gen != m.gen {
		m.late++
		return
	}
	if m.state == StateHalfOpen && end >= m.until {
		m.enter(StateOpen, m.until)
		m.late++
		m.lateProbes++
		return
	}
	if errors.Is(err, errIgnored) {
		if m.state == StateHalfOpen {
			m.issued--
		}
		return
	}
	if m.state == StateOpen {
		if err == nil && d <= m.slowT {
			m.trickle++
			m.enter(StateHalfOpen, end)
		}
		return
	}
	m.window = append(m.window, rec{fail: err != nil, slow: d > m.slowT})
	switch m.state {
	case StateClosed:
		if len(m.window) > m.size {
			m.window = m.window[1:]
		}
		if len(m.window) >= min(m.minCalls, m.size) && m.exceeded(m.window) {
			m.enter(StateOpen, end)
		}
	case StateHalfOpen:
		if len(m.window) == m.probes {
			if m.exceeded(m.window) {
				m.enter(StateOpen, end)
			} else {
				m.enter(StateClosed, end)
			}
		}
	}
}

var errIgnored = errors.New("ignored")

// TestMatchesModel drives the breaker and the model with the same random
// sequences of admissions, completions (in any order, late ones included)
// and time steps, and compares every decision and state.
func TestMatchesModel(t *testing.T) {
	closes, lateProbes, duplicates, trickle := 0, 0, 0, 0
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 99))
		m := &model{
			size: 1 + rng.IntN(12), minCalls: 1 + rng.IntN(12), probes: 1 + rng.IntN(4),
			rate: float64(10 + rng.IntN(90)), slowRate: float64(10 + rng.IntN(90)),
			slowT: 100 * time.Millisecond, wait: time.Second, grow: 2, growMax: 5 * time.Second,
			maxHalfOpen: time.Duration(1+rng.IntN(3)) * time.Second,
		}
		if seed%2 == 1 {
			m.every = 2 + rng.IntN(4)
		}
		b := mustNew(t, WithCountWindow(m.size), WithMinimumCalls(m.minCalls), WithHalfOpenCalls(m.probes),
			WithFailureRate(m.rate), WithSlowCalls(m.slowT, m.slowRate), WithWaitInOpen(m.wait),
			WithWaitGrowth(m.grow, m.growMax), WithMaxWaitInHalfOpen(m.maxHalfOpen), WithOpenProbes(m.every),
			WithClassifier(func(err error) Outcome {
				switch {
				case err == nil:
					return Success
				case errors.Is(err, errIgnored):
					return Ignore
				}
				return Failure
			}))
		type pending struct {
			p     Permit
			gen   int
			start time.Duration
		}
		var out, finished []pending
		now := time.Duration(0)
		for step := range 3000 {
			switch op := rng.IntN(11); {
			case op < 4:
				gen, werr := m.allow(now)
				p, err := b.AllowAt(at(now))
				if err != werr {
					t.Fatalf("seed %d step %d: Breaker.AllowAt(t0+%v) error = %v, want %v", seed, step, now, err, werr)
				}
				if err == nil {
					out = append(out, pending{p, gen, now})
				}
			case op < 8 && len(out) > 0:
				i := rng.IntN(len(out))
				c := out[i]
				out = append(out[:i], out[i+1:]...)
				var err error
				switch rng.IntN(5) {
				case 0, 1:
					err = errBoom
				case 2:
					err = errIgnored
				}
				// Calls finish no earlier than now and at most 200ms later.
				d := now - c.start + time.Duration(rng.IntN(200))*time.Millisecond
				m.done(c.gen, err, d, c.start+d)
				if !c.p.Done(err, d) {
					t.Fatalf("seed %d step %d: first Permit.Done = false, want true", seed, step)
				}
				finished = append(finished, c)
			case op < 9 && len(finished) > 0:
				// A permit finished again, maybe with another outcome: it
				// must change nothing.
				c := finished[rng.IntN(len(finished))]
				m.duplicates++
				if c.p.Done(errBoom, time.Duration(rng.IntN(200))*time.Millisecond) {
					t.Fatalf("seed %d step %d: second Permit.Done = true, want false", seed, step)
				}
			default:
				now += time.Duration(rng.IntN(800)) * time.Millisecond
			}
			s := b.Snapshot()
			fails := int64(0)
			for _, r := range m.window {
				if r.fail {
					fails++
				}
			}
			if s.State != m.state || s.WindowCalls != int64(len(m.window)) || s.WindowFailures != fails ||
				s.Late != uint64(m.late) || s.Duplicates != uint64(m.duplicates) {
				t.Fatalf("seed %d step %d: Snapshot() state %v window %d calls %d failures, late %d, duplicates %d; model %v %d %d, %d, %d",
					seed, step, s.State, s.WindowCalls, s.WindowFailures, s.Late, s.Duplicates,
					m.state, len(m.window), fails, m.late, m.duplicates)
			}
		}
		closes += m.closes
		lateProbes += m.lateProbes
		duplicates += m.duplicates
		trickle += m.trickle
		if m.changes < 5 {
			t.Errorf("seed %d: only %d state changes; the sequence does not exercise the machine", seed, m.changes)
		}
	}
	if closes < 40 {
		t.Errorf("half-open → closed %d times over all seeds, want the sequences to reach it often", closes)
	}
	if lateProbes < 10 || duplicates < 100 {
		t.Errorf("over all seeds %d probes ended after the half-open deadline and %d permits were finished twice; want the sequences to exercise both", lateProbes, duplicates)
	}
	if trickle < 40 {
		t.Errorf("open → half-open through a probe of the trickle %d times over all seeds, want the sequences to reach it often", trickle)
	}
	t.Logf("%d closings from half-open, %d late probes, %d duplicate finishes, %d ends of the wait in open by a probe over all seeds", closes, lateProbes, duplicates, trickle)
}
