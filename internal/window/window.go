// Package window provides a sliding window of time bins with running totals,
// shared by the time-based breaker window and the adaptive throttle.
//
// A Bins value is not safe for concurrent use; its owner serialises access
// (the owners keep the critical section to a few integer operations).
// Time is an int64 count of nanoseconds from an origin chosen by the owner,
// so callers inject time freely and tests never sleep.
package window

import (
	"fmt"
	"time"
)

// Sums holds up to three counters, for one bin or for the whole window. The
// meaning of each counter belongs to the owner (for example requests and
// accepts, or calls, failures and slow calls).
type Sums [3]int64

// Bins is a ring of n time bins of equal width covering a sliding window of
// n × width. The window at time t holds the bin containing t and the n-1
// bins before it; older bins expire as time advances. Totals over the window
// are kept up to date incrementally, so Add and Total cost O(1) amortised.
//
// Time that goes backwards (an earlier now than one already seen) is treated
// as the newest bin's time: the sample is counted, nothing expires.
//
// The zero value is not usable; call New. Not safe for concurrent use.
type Bins struct {
	width   int64 // nanoseconds per bin
	bins    []Sums
	last    int64 // absolute bin number (floor(now/width)) of the newest bin
	started bool
	total   Sums
}

// MaxBins is the most bins a window may have. The owners' options
// (breaker.WithTimeWindow, throttle.WithWindow) refuse more with an error;
// New panics, as its owners validate first.
//
// The ring is allocated whole, 24 bytes a bin (240 KB at the bound), and a
// breaker allocates a fresh one each time it closes; and an Add after a
// pause shorter than the window clears every bin the pause skipped, under
// its owner's lock, so the bound also caps that work at 10,000 bins (tens
// of microseconds). 10,000 one-second bins — Resilience4j's bin width —
// cover 2h46m, far longer than the windows these owners judge (the
// throttle's default is 120 bins); a longer window takes wider bins.
// Without a bound, a day in 1 ms bins asked for 2 GB.
const MaxBins = 10_000

// New returns a window of the given size split into n bins of size/n each.
// It panics if n is not in [1, MaxBins] or size/n is not at least one
// nanosecond.
func New(size time.Duration, n int) *Bins {
	if n < 1 || n > MaxBins {
		panic(fmt.Sprintf("window: bins must be in [1, %d], got %d", MaxBins, n))
	}
	if size <= 0 || size/time.Duration(n) <= 0 {
		panic(fmt.Sprintf("window: size must be >= bins nanoseconds, got size %v for %d bins", size, n))
	}
	return &Bins{width: int64(size / time.Duration(n)), bins: make([]Sums, n)}
}

// Width returns the duration of one bin.
func (w *Bins) Width() time.Duration { return time.Duration(w.width) }

// Len returns the number of bins.
func (w *Bins) Len() int { return len(w.bins) }

// Add counts s in the bin containing now and returns the totals over the
// window at now, s included.
func (w *Bins) Add(now int64, s Sums) Sums {
	i := w.advance(now)
	b := &w.bins[i]
	for k := range s {
		b[k] += s[k]
		w.total[k] += s[k]
	}
	return w.total
}

// Total returns the totals over the window at now, expiring old bins.
func (w *Bins) Total(now int64) Sums {
	w.advance(now)
	return w.total
}

// Sum returns the totals as of the latest time seen, without expiring
// anything.
func (w *Bins) Sum() Sums { return w.total }

// Reset empties every bin.
func (w *Bins) Reset() {
	clear(w.bins)
	w.total = Sums{}
	w.started = false
}

// advance moves the window so that its newest bin contains now and returns
// that bin's index in the ring.
func (w *Bins) advance(now int64) int {
	abs := floorDiv(now, w.width)
	n := int64(len(w.bins))
	switch {
	case !w.started:
		w.started = true
		w.last = abs
	case abs <= w.last:
		// Same bin, or time went backwards: count in the newest bin.
	case abs-w.last >= n:
		clear(w.bins)
		w.total = Sums{}
		w.last = abs
	default:
		for a := w.last + 1; a <= abs; a++ {
			b := &w.bins[mod(a, n)]
			for k := range b {
				w.total[k] -= b[k]
			}
			*b = Sums{}
		}
		w.last = abs
	}
	return int(mod(w.last, n))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func mod(a, n int64) int64 {
	m := a % n
	if m < 0 {
		m += n
	}
	return m
}
