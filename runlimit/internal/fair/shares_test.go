package fair

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

func newShares(noRoomy bool) *Shares {
	s := new(Shares)
	s.Init(noRoomy)
	return s
}

// TestReserveCountsBackloggedLanes: a lane's weight counts as backlogged
// from its second call to its last but one, whatever the order.
func TestReserveCountsBackloggedLanes(t *testing.T) {
	s := newShares(false)
	ci := admission.Critical.Index()
	var count atomic.Int64
	for i, want := range []int64{0, 3 * One, 3 * One} {
		s.Reserve(ci, &count, 3*One, 10)
		if got := s.Backlogged(ci); got != want {
			t.Errorf("after %d reservations: backlogged %d, want %d", i+1, got, want)
		}
	}
	if got := s.Work(ci); got != 30 {
		t.Errorf("work %d, want 30", got)
	}
	s.Unreserve(ci, &count, 3*One, 1, 10) // 3 → 2
	if b := s.Backlogged(ci); b != 3*One {
		t.Errorf("after 1 of 3 ended: backlogged %d, want %d", b, 3*One)
	}
	s.Unreserve(ci, &count, 3*One, 1, 10) // 2 → 1
	if b, w := s.Backlogged(ci), s.Work(ci); b != 0 || w != 10 {
		t.Errorf("after 2 of 3 ended: backlogged %d, work %d; want 0, 10", b, w)
	}
	s.Reserve(ci, &count, 3*One, 10)
	s.Reserve(ci, &count, 3*One, 10)
	s.Unreserve(ci, &count, 3*One, 2, 20) // 3 → 1 at once
	if b, w := s.Backlogged(ci), s.Work(ci); b != 0 || w != 10 {
		t.Errorf("after 2 of 3 ended at once: backlogged %d, work %d; want 0, 10", b, w)
	}
	s.Unreserve(ci, &count, 3*One, 1, 10)
	if b, w, n := s.Backlogged(ci), s.Work(ci), count.Load(); b != 0 || w != 0 || n != 0 {
		t.Errorf("after all ended: backlogged %d, work %d, count %d; want 0", b, w, n)
	}
}

// TestFits: a lane of a full server holds the calls that start within
// half the queue target at the limit, plus two; a class that leaves room
// a whole target; a lower class what the classes above leave of it; a
// backlogged lane of a full server its weight's share; and never less
// than two.
func TestFits(t *testing.T) {
	ms := float64(time.Millisecond)
	crit, shed := admission.Critical.Index(), admission.Sheddable.Index()
	// 2 turns x 5ms (half a 10ms target) / 5ms, plus 2: 4.
	base := Bound{Class: crit, Weight: One, Limit: 2, Horizon: 5 * ms, Cost: 5 * ms}
	most := func(s *Shares, ln Bound, extra float64) int64 {
		for q := int64(1); q < 1000; q++ {
			ln.Queued = q
			if !s.Fits(ln, extra) {
				return q
			}
		}
		return 1000
	}
	s := newShares(false)
	if got := most(s, base, 0); got != 4 {
		t.Errorf("full server: first queued count refused %d, want 4", got)
	}
	if ln := base; !s.Fits(ln, 0) {
		t.Errorf("no call queued: refused, want admitted")
	}
	if got := most(s, base, 10*ms); got != 6 {
		t.Errorf("10ms of extra bound: first refused %d, want 6", got)
	}
	s.SetRoomy(crit, true)
	if got := most(s, base, 0); got != 6 {
		t.Errorf("class leaves room: first refused %d, want 6 (a whole target)", got)
	}
	off := newShares(true)
	off.SetRoomy(crit, true)
	if got := most(off, base, 0); got != 4 {
		t.Errorf("roomy switched off: first refused %d, want 4", got)
	}
	s.SetBacklogged(crit, 2*One)
	s.SetFull(true)
	if got := most(s, base, 0); got != 6 {
		t.Errorf("full, two lanes backlogged, the class leaving room: first refused %d, want 6 (no share)", got)
	}
	s.SetBacklogged(crit, 0)
	s.SetFull(false)
	s.SetRoomy(crit, false)
	// A lower class: the class above holds 5ms of work and took half the
	// turns: 2 x 5ms x 0.5 - 5ms = 0 left: refused from the first queued.
	s.AddWork(crit, int64(5*ms))
	s.SetServed(crit, 1)
	s.SetServed(shed, 1)
	s.Share()
	low := base
	low.Class = shed
	if got := most(s, low, 0); got != 1 {
		t.Errorf("lower class with nothing left: first refused %d, want 1", got)
	}
	// Two lanes backlogged on a full server: each gets half of 4, but two
	// at least.
	s = newShares(false)
	s.SetBacklogged(crit, 2*One)
	s.SetFull(true)
	if got := most(s, base, 0); got != 2 {
		t.Errorf("full, two lanes backlogged: first refused %d, want 2", got)
	}
	s.SetFull(false)
	if got := most(s, base, 0); got != 4 {
		t.Errorf("not full, two lanes backlogged: first refused %d, want 4 (no share)", got)
	}
}

// TestCloseSlack: the slack grows by slackGain times the idle time under
// overload seen at both ends of the interval, to an interval at most;
// loses a tenth when overload begins or ends; holds the most work seen
// waiting at a handover below capacity (seeded), dropped at the first
// overloaded interval without idle time; and shrinks by half the least
// work waiting at a handover while a queue stood.
func TestCloseSlack(t *testing.T) {
	ms := float64(time.Millisecond)
	iv := Interval{Wall: 100 * ms, Busy: 100 * ms, Limit: 1, NoneRan: 100 * ms, Interval: 100 * ms, Procs: 1}
	s := newShares(false)
	step := func(what string, iv Interval, want float64) {
		t.Helper()
		s.Close(iv)
		if got := float64(s.Slack()); got != want {
			t.Errorf("%s: slack %v, want %v", what, time.Duration(got), time.Duration(want))
		}
	}
	over := iv
	over.Over = true
	step("overload begins", over, 0)
	idle := over
	idle.Busy = 80 * ms // 20ms idle
	step("20ms idle under overload", idle, 60*ms)
	idle.Busy = 97 * ms // 3ms idle: under minIdle
	step("3ms idle", idle, 60*ms)
	cpu := idle
	cpu.Busy, cpu.HasCPU, cpu.CPU = 60*ms, true, 0.99
	step("40ms without a turn, the CPU busy", cpu, 60*ms)
	cpu.CPU = 0.9 // at most 10ms idle: 60 + 30, an interval at most
	step("the CPU at 0.9", cpu, 90*ms)
	step("overload ends", iv, 81*ms)
	s.AddWork(admission.Critical.Index(), int64(95*ms))
	s.Handed()
	step("below capacity, 95ms waited at a handover", iv, 95*ms)
	step("overload begins again", over, 85.5*ms)
	step("overload without idle time drops the seeded slack", over, 0)
	s.SetSlack(int64(60 * ms))
	s.Handed() // 95ms waits
	stood := over
	stood.Stood = true
	step("a queue stood, 95ms the least waiting at a handover", stood, 60*ms-min(60*ms, 47.5*ms))
}

// TestCloseRoomAndFull: a class leaves room while the classes below it
// got a twentieth of the turns (smoothed) and were not starved for
// StarvedAfter intervals in a row with calls waiting; the server is full
// while its turns were busy nine tenths of the interval at the limit.
func TestCloseRoomAndFull(t *testing.T) {
	ms := float64(time.Millisecond)
	shed, crit := admission.Sheddable.Index(), admission.Critical.Index()
	s := newShares(false)
	for range 30 {
		s.SetServed(shed, 40)
		s.SetServed(crit, 60)
		s.Share()
	}
	s.SetServed(crit, 100)
	s.Share()
	half := Interval{Wall: 1000 * ms, Busy: 1000 * ms, Limit: 2, Interval: 100 * ms, Procs: 1}
	s.Close(half)
	if !s.Roomy(crit) || s.Roomy(shed) || s.Full() {
		t.Fatalf("sheddable served in the smoothed counts, none waiting, half busy: roomy %v/%v, full %v; want critical roomy only, not full",
			s.Roomy(crit), s.Roomy(shed), s.Full())
	}
	s.AddWork(shed, int64(5*ms)) // a sheddable call waits
	for i := 1; i <= StarvedAfter; i++ {
		s.Close(half)
		if got, want := s.Roomy(crit), i < StarvedAfter; got != want {
			t.Errorf("sheddable waiting and served nothing for %d intervals: critical roomy %v, want %v", i, got, want)
		}
	}
	s.SetServed(shed, 1) // served again: no longer starved
	s.Share()
	s.Close(half)
	if !s.Roomy(crit) {
		t.Errorf("sheddable served again: critical not roomy, want roomy")
	}
	full := half
	full.Busy = 1800 * ms
	s.Close(full)
	if !s.Full() {
		t.Errorf("turns busy 0.9 of the interval at the limit: not full, want full")
	}
}

// TestPassesOver: a turn passes over a class whose turns ended in this
// interval or the last, above the highest class waiting.
func TestPassesOver(t *testing.T) {
	shed, crit := admission.Sheddable.Index(), admission.Critical.Index()
	s := newShares(false)
	if s.PassesOver(shed) {
		t.Errorf("no turn ended: passes over, want not")
	}
	s.Served(crit)
	if !s.PassesOver(shed) || s.PassesOver(crit) {
		t.Errorf("a critical turn ended in this interval: passes over sheddable %v, critical %v; want true, false", s.PassesOver(shed), s.PassesOver(crit))
	}
	s.Share()
	if !s.PassesOver(shed) {
		t.Errorf("a critical turn ended in the last interval: not passing over sheddable, want passing")
	}
	s.Share()
	if s.PassesOver(shed) {
		t.Errorf("no turn ended for two intervals: passes over, want not")
	}
}
