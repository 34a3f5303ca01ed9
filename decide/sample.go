package decide

import (
	"math"
	"sync/atomic"
	"time"
)

// sampler is a lock-free token bucket over the instants it is given
// (GCRA): it allows rate events a second, in bursts of as many. Its zero
// value allows every event.
type sampler struct {
	every int64 // ns between events at the rate; 0: every event allowed
	slack int64 // ns of credit a burst may use: (burst - 1) × every
	tat   atomic.Int64
}

// init sets the rate: 0 is DefaultRefusalsPerSecond, a negative rate
// allows every event.
func (s *sampler) init(rate float64) {
	switch {
	case rate < 0 || math.IsNaN(rate):
		return
	case rate == 0:
		rate = DefaultRefusalsPerSecond
	}
	every := float64(time.Second) / rate
	if every < 1 {
		return // faster than a nanosecond: every event
	}
	burst := max(1, math.Floor(rate))
	s.every = int64(min(every, float64(math.MaxInt64/4)))
	s.slack = int64(min((burst-1)*float64(s.every), float64(math.MaxInt64/4)))
}

// allow reports whether an event at now (ns) is sampled, taking a token.
func (s *sampler) allow(now int64) bool {
	if s.every == 0 {
		return true
	}
	for {
		tat := s.tat.Load()
		// More than a burst ahead: the wall clock stepped back (events
		// only ever move it a burst ahead), which must not stop the
		// samples for the whole step. Start anew.
		stepped := tat != 0 && tat-now > s.slack+s.every
		if tat != 0 && !stepped && now < tat-s.slack {
			return false
		}
		base := tat
		if tat == 0 || stepped || now > tat {
			base = now
		}
		next := base + s.every
		if s.tat.CompareAndSwap(tat, next) {
			return true
		}
	}
}
