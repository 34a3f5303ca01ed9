package places

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestInOut: a place counted at a generation comes out once, at that
// generation or the next; after that it has lapsed, and the next Lapse
// returns it with its work.
func TestInOut(t *testing.T) {
	var s Slots
	in, counted, l := s.In(5, 300)
	if in != 5 || !counted || l != (Lapsed{}) {
		t.Fatalf("In(5, 300) on empty slots = %d, %t, %+v; want 5, true, none lapsed", in, counted, l)
	}
	if ok, _ := s.Out(5, 300, 6); !ok || s.Count() != 0 {
		t.Fatalf("Out at the next generation = %t, Count %d; want true, 0", ok, s.Count())
	}
	s.In(5, 300)
	s.In(5, 200)
	if l := s.Lapse(6); l != (Lapsed{}) {
		t.Errorf("Lapse(6) of generation 5 = %+v, want none: still live", l)
	}
	if l := s.Lapse(7); l != (Lapsed{N: 2, Work: 500}) {
		t.Errorf("Lapse(7) of two places of generation 5 = %+v, want 2 of 500µs", l)
	}
	if ok, l := s.Out(5, 300, 7); ok || l != (Lapsed{}) {
		t.Errorf("Out of a lapsed place = %t, %+v; want false, none (already given back)", ok, l)
	}
	if s.Count() != 0 {
		t.Errorf("Count after the lapse = %d, want 0", s.Count())
	}
}

// TestInLapsesItsSlot: counting a place in a slot that holds a lapsed
// generation ends those places first and returns them; a place whose
// generation was read just before a later one began is counted in the
// later one.
func TestInLapsesItsSlot(t *testing.T) {
	var s Slots
	s.In(5, 100)
	in, counted, l := s.In(7, 50) // same slot (odd), generation 5 lapsed at 7
	if in != 7 || !counted || l != (Lapsed{N: 1, Work: 100}) {
		t.Fatalf("In(7) over a lapsed generation 5 = %d, %t, %+v; want 7, true, 1 of 100µs", in, counted, l)
	}
	s.In(8, 10)
	if in, _, _ := s.In(6, 10); in != 8 {
		t.Errorf("In(6) with generation 8 begun in its slot: counted in %d, want 8", in)
	}
	if got := s.Before(8); got != 1 {
		t.Errorf("Before(8) = %d, want 1 (generation 7's)", got)
	}
	if got := s.Before(9); got != 3 {
		t.Errorf("Before(9) = %d, want 3", got)
	}
}

// TestFullSlot: a place that would overflow its slot's count or work is
// not counted (it never lapses) and leaves the slot as it was.
func TestFullSlot(t *testing.T) {
	var s Slots
	if _, counted, _ := s.In(2, WorkMask); !counted {
		t.Fatal("In of WorkMask µs on an empty slot: not counted")
	}
	if _, counted, _ := s.In(2, 1); counted {
		t.Error("In beyond WorkMask µs: counted, want not")
	}
	var f Slots
	for range nMask {
		f.In(4, 0)
	}
	if _, counted, _ := f.In(4, 0); counted || f.Count() != nMask {
		t.Errorf("In beyond %d places: counted %t, Count %d; want false, %d", nMask, counted, f.Count(), nMask)
	}
}

// TestGenerationsWrap: generations wrap at GenMask without a place
// lapsing early or living on.
func TestGenerationsWrap(t *testing.T) {
	if g := Gen(int64(GenMask+1)*100, 100); g != 0 {
		t.Errorf("Gen one past GenMask intervals = %d, want 0", g)
	}
	if g := Gen(-5, 100); g != 0 {
		t.Errorf("Gen of a negative instant = %d, want 0", g)
	}
	var s Slots
	s.In(GenMask, 10)
	if l := s.Lapse(0); l.N != 0 {
		t.Errorf("Lapse(0) of generation GenMask, the one before: %+v, want none", l)
	}
	if !Live(1, GenMask) {
		t.Error("generation 1 read at GenMask (two ahead): not live")
	}
	if l := s.Lapse(1); l.N != 1 {
		t.Errorf("Lapse(1) of generation GenMask, two behind: %+v, want 1", l)
	}
}

// TestPlacesRace: places counted from many goroutines across changing
// generations each end once, by Out or as lapsed.
func TestPlacesRace(t *testing.T) {
	var s Slots
	var gen atomic.Uint64
	var ins, outs, lapsed, work atomic.Int64
	give := func(l Lapsed) { lapsed.Add(int64(l.N)); work.Add(int64(l.Work)) }
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				if w == 0 && i%50 == 0 {
					gen.Add(1)
				}
				in, counted, l := s.In(gen.Load(), 3)
				give(l)
				if !counted {
					continue
				}
				ins.Add(1)
				if i%3 == 0 {
					continue // never asked for: lapses
				}
				ok, l := s.Out(in, 3, gen.Load())
				give(l)
				if ok {
					outs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	give(s.Lapse(gen.Load() + 3))
	if s.Count() != 0 {
		t.Errorf("Count after every place ended = %d, want 0", s.Count())
	}
	if ins.Load() != outs.Load()+lapsed.Load() {
		t.Errorf("%d places counted, %d taken out and %d lapsed", ins.Load(), outs.Load(), lapsed.Load())
	}
}

// TestNoAllocations: counting a place and taking it out allocate nothing.
func TestNoAllocations(t *testing.T) {
	var s Slots
	if n := testing.AllocsPerRun(100, func() {
		in, _, _ := s.In(3, 7)
		s.Out(in, 7, 3)
		s.Lapse(3)
	}); n != 0 {
		t.Errorf("In, Out and Lapse: %v allocations, want 0", n)
	}
}
