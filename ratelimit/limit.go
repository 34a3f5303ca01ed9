package ratelimit

import (
	"math"
	"math/bits"
	"time"
)

// Limit is a rate of events per second. The zero Limit allows no events
// beyond the burst; Inf allows every event. A Limit is a plain number,
// safe to copy and share.
type Limit float64

// Inf is the infinite rate limit: it allows all events, even when the
// requested count exceeds the burst. A Limit of +Inf (math.Inf(1)) is
// infinite too.
const Inf = Limit(math.MaxFloat64)

// Every converts a minimum time interval between events to a Limit.
// An interval of zero or less gives Inf.
func Every(interval time.Duration) Limit {
	if interval <= 0 {
		return Inf
	}
	return 1 / Limit(interval.Seconds())
}

// Bounds of the bucket's internal time arithmetic. Instants are nanoseconds
// since the bucket's epoch, clamped to ±2^60 ns (about 36 years); a bucket's
// capacity in time (burst × refill interval) is capped at 2^58 ns (about 9
// years). Together they keep every sum below 2^61, which leaves the low bits
// of the state word free for the configuration generation.
const (
	genBits   = 2
	genMask   = 1<<genBits - 1
	maxTau    = int64(1) << 58
	minNow    = -(int64(1) << 60)
	maxNow    = int64(1) << 60
	farPast   = minNow - 1
	maxDebt   = 2 * maxTau
	nsPerSec  = 1e9
	frozenIvl = int64(1e9) // cost of one token while the rate is 0, in virtual ns
)

// bucketConfig is one immutable configuration of a bucket, with the
// quantities the admission path needs precomputed. A bucket swaps the whole
// value atomically when its rate, burst or scale changes.
type bucketConfig struct {
	limit Limit   // configured rate
	burst int     // configured burst
	scale float64 // factor in (0, 1] applied to rate and burst

	gen      int64 // generation, stamped into the low bits of the state word
	inf      bool  // every event is allowed
	frozen   bool  // effective rate is 0: the bucket never refills
	burstEff int   // burst after scaling, at least 1
	interval int64 // ns of debt one token adds (frozenIvl if frozen)
	tau      int64 // burstEff × interval: the debt at which the bucket is empty
}

func newBucketConfig(r Limit, b int, scale float64) bucketConfig {
	c := bucketConfig{limit: r, burst: b, scale: scale}
	c.derive()
	return c
}

// derive computes the effective quantities from limit, burst and scale.
func (c *bucketConfig) derive() {
	c.inf, c.frozen = false, false
	// Clamped as a float: a burst near math.MaxInt scales to 2^63 or
	// more, which converts to an int as the platform pleases (amd64:
	// math.MinInt64, which would read as a burst of 1). maxTau caps it
	// below in any case.
	c.burstEff = int(min(math.Floor(float64(c.burst)*c.scale+1e-9), float64(maxTau)))
	if c.burstEff < 1 {
		c.burstEff = 1
	}
	if c.limit == Inf || math.IsInf(float64(c.limit), 1) { // +Inf is no finite rate either
		c.inf = true
		c.interval, c.tau = 1, int64(c.burstEff)
		return
	}
	r := float64(c.limit) * c.scale
	ivl := nsPerSec / r
	if r <= 0 || ivl > float64(maxTau) {
		c.frozen = true
		c.interval = frozenIvl
	} else {
		c.interval = wholeNanos(ivl)
	}
	if int64(c.burstEff) > maxTau/c.interval {
		c.burstEff = int(maxTau / c.interval)
	}
	c.tau = int64(c.burstEff) * c.interval
}

// wholeNanos resolves a refill interval to whole nanoseconds, rounding up so
// that the bucket never refills faster than its rate. An interval within a
// millionth of a nanosecond of a whole number is taken as that number, so
// that rates such as 100 × 0.2 are not rounded up by float noise.
func wholeNanos(ivl float64) int64 {
	n := math.Round(ivl)
	if math.Abs(ivl-n) > 1e-6 {
		n = math.Ceil(ivl)
	}
	if n < 1 {
		return 1
	}
	return int64(n)
}

// next returns the configuration that edit makes of c, with the next
// generation, and whether it differs from c.
func (c *bucketConfig) next(edit func(*bucketConfig)) (*bucketConfig, bool) {
	nc := *c
	edit(&nc)
	nc.derive()
	if nc == *c {
		return nil, false
	}
	nc.gen = (c.gen + 1) & genMask
	return &nc, true
}

// clock returns the instant a configuration measures debt from: now, or 0
// while the bucket is frozen (time does not refill it).
func (c *bucketConfig) clock(now int64) int64 {
	if c.frozen {
		return 0
	}
	return now
}

// take computes the theoretical arrival time after admitting n ≥ 1 tokens at
// now from the theoretical arrival time tat, and whether they fit.
func (c *bucketConfig) take(tat, now int64, n int) (int64, bool) {
	if n > c.burstEff {
		return tat, false
	}
	t := c.clock(now)
	newTat := max(tat, t) + int64(n)*c.interval
	return newTat, newTat-t <= c.tau
}

// tokens reports the tokens available at now in a bucket whose theoretical
// arrival time is tat. The result is negative when time ran backwards past
// tokens already spent.
func (c *bucketConfig) tokens(tat, now int64) float64 {
	if c.inf {
		return float64(c.burstEff)
	}
	t := c.clock(now)
	return float64(c.burstEff) - float64(max(tat, t)-t)/float64(c.interval)
}

// convert carries a bucket's state from configuration old to configuration
// nc at now: the tokens already earned are kept (capped at the new burst),
// and refill continues at the new rate.
func convert(old, nc *bucketConfig, tat, now int64) int64 {
	var debt int64
	if !old.inf {
		to := old.clock(now)
		debt = min(max(tat-to, 0), maxDebt)
	}
	if nc.inf {
		return farPast
	}
	// tokens = burstOld − debt/ivlOld; newDebt = (burstNew − min(burstNew, tokens)) × ivlNew.
	scaled := mulDivCeil(debt, nc.interval, old.interval)
	// nd = scaled + (burstNew − burstOld) × ivlNew. A rise of the burst
	// adds at most the new tau; a fall by more than maxDebt's worth of new
	// intervals leaves no debt whatever the old one, and its product, which
	// may overflow (a huge burst whose rate is lowered), is not taken.
	var nd int64
	if diff := int64(nc.burstEff) - int64(old.burstEff); diff >= 0 || -diff <= maxDebt/nc.interval {
		nd = scaled + diff*nc.interval
	}
	nd = min(max(nd, 0), maxDebt)
	return nc.clock(now) + nd
}

// mulDivCeil returns ⌈a×b/d⌉ for non-negative a, b and positive d, saturated
// at maxDebt.
func mulDivCeil(a, b, d int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(d) {
		return maxDebt
	}
	q, r := bits.Div64(hi, lo, uint64(d))
	if r != 0 {
		q++
	}
	if q > uint64(maxDebt) {
		return maxDebt
	}
	return int64(q)
}

// clampNow bounds an instant, in ns since a bucket's epoch, to the range its
// arithmetic supports.
func clampNow(ns int64) int64 {
	return min(max(ns, minNow), maxNow)
}

// pack and unpack combine a theoretical arrival time and a generation into
// one state word.
func pack(tat, gen int64) int64 { return tat<<genBits | gen }
func unpack(s int64) (tat, gen int64) {
	return s >> genBits, s & genMask
}
