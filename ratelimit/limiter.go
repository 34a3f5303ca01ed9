package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// ErrWouldExceedDeadline is returned by Wait and WaitN when the tokens could
// not be available before the context's deadline; no tokens are taken.
var ErrWouldExceedDeadline = errors.New("ratelimit: wait would exceed context deadline")

// ErrNeverAvailable is returned by Wait and WaitN when the rate is 0 and the
// bucket holds fewer tokens than asked for: waiting cannot help.
var ErrNeverAvailable = errors.New("ratelimit: rate is 0 and the bucket lacks the tokens")

// A Limiter is a token bucket: it holds up to a burst of tokens, refills at a
// rate of tokens per second, and admits an event when it can take that
// event's tokens. A new Limiter starts full.
//
// The bucket is kept as one word — the theoretical arrival time of the
// generic cell rate algorithm (GCRA), an exact token bucket — updated by
// compare-and-swap, so Allow and AllowN take no lock and allocate nothing.
// The state only ever moves forward, so callers that read the clock
// concurrently, or pass instants out of order, can never make the bucket
// refill twice: an instant earlier than one already seen is answered as
// conservatively as the bucket's debt implies.
//
// Refill is resolved to whole nanoseconds per token, rounded up so the
// bucket never refills faster than its rate; rates above 10^9 tokens per
// second therefore refill one token per nanosecond at most. A rate so low
// that one token takes longer than about 9 years to earn behaves as rate 0,
// and burst × refill interval is capped at about 9 years.
//
// The scale factor (SetScale) multiplies both rate and burst (burst rounded
// down, at least 1) without forgetting the configured values, for adaptive
// controllers such as loadshed.
//
// Use NewLimiter, which takes the rate and burst and has no other
// tunables (the scale starts at 1); the zero value is not usable. A
// Limiter is safe for concurrent use by multiple goroutines.
type Limiter struct {
	state atomic.Int64                 // pack(theoretical arrival time, cfg.gen)
	cfg   atomic.Pointer[bucketConfig] // immutable; replaced by the Set methods
	mu    sync.Mutex                   // serialises the Set methods
	epoch time.Time                    // instants are ns since epoch (monotonic)
}

// NewLimiter returns a Limiter that refills at rate r tokens per second and
// holds at most b tokens, starting full, with scale 1.
//
// It returns an error naming every bad value if r is negative or NaN, or if
// b < 1: a limiter that silently admitted everything or nothing would hide
// the mistake.
func NewLimiter(r Limit, b int) (*Limiter, error) {
	if err := errors.Join(checkLimit("NewLimiter", r), checkBurst("NewLimiter", b)); err != nil {
		return nil, err
	}
	l := &Limiter{epoch: time.Now()}
	c := newBucketConfig(r, b, 1)
	l.cfg.Store(&c)
	l.state.Store(pack(farPast, c.gen))
	return l, nil
}

// checkLimit, checkBurst and checkScale validate a user's value for the
// constructor or setter fn; they return nil, without allocating, for a
// valid one.
func checkLimit(fn string, r Limit) error {
	if r < 0 || math.IsNaN(float64(r)) {
		return fmt.Errorf("ratelimit: %s: rate must be >= 0 and not NaN, got %v", fn, float64(r))
	}
	return nil
}

func checkBurst(fn string, b int) error {
	if b < 1 {
		return fmt.Errorf("ratelimit: %s: burst must be >= 1, got %d", fn, b)
	}
	return nil
}

func checkScale(fn string, f float64) error {
	if !(f > 0 && f <= 1) {
		return fmt.Errorf("ratelimit: %s: scale must be in (0, 1], got %v", fn, f)
	}
	return nil
}

// now returns the current instant in ns since the epoch. It reads only the
// monotonic clock, which costs about half of time.Now.
func (l *Limiter) now() int64 { return int64(time.Since(l.epoch)) }

// at converts an instant to ns since the epoch.
func (l *Limiter) at(t time.Time) int64 { return clampNow(int64(t.Sub(l.epoch))) }

// load returns a consistent state word and configuration. While a Set method
// is between publishing a new configuration and converting the state, the
// generations differ and load waits for it.
func (l *Limiter) load() (int64, *bucketConfig) {
	for {
		s := l.state.Load()
		c := l.cfg.Load()
		if s&genMask == c.gen {
			return s, c
		}
		runtime.Gosched()
	}
}

// Allow reports whether one event may happen now, and takes its token if so.
// It is shorthand for AllowN(time.Now(), 1), but reads only the monotonic
// clock.
//
// The clock is read once, before the compare-and-swap loop. A retry after a
// lost race therefore uses an instant slightly older than the winner's; that
// can only make the answer more conservative, never move the state back: the
// theoretical arrival time grows by the cost of every admission whatever
// instant it was computed at, so no interleaving refills twice (the
// over-admission of golang/go#65508 and #71360 cannot happen here). Reading
// the clock again on each retry would cost a clock read per lost race and
// halve throughput under contention.
func (l *Limiter) Allow() bool {
	now := l.now()
	for {
		s, c := l.load()
		if c.inf {
			return true
		}
		tat, _ := unpack(s)
		newTat, ok := c.take(tat, now, 1)
		if !ok {
			return false
		}
		if l.state.CompareAndSwap(s, pack(newTat, c.gen)) {
			return true
		}
	}
}

// AllowN reports whether n events may happen at instant now, and takes their
// tokens if so. With n ≤ 0 it reports true and takes nothing (it never gives
// tokens back). With n above the burst it reports false, unless the limit is
// Inf, which allows any n.
func (l *Limiter) AllowN(now time.Time, n int) bool {
	return l.allowAt(l.at(now), n)
}

func (l *Limiter) allowAt(now int64, n int) bool {
	if n <= 0 {
		return true
	}
	for {
		s, c := l.load()
		if c.inf {
			return true
		}
		tat, _ := unpack(s)
		newTat, ok := c.take(tat, now, n)
		if !ok {
			return false
		}
		if l.state.CompareAndSwap(s, pack(newTat, c.gen)) {
			return true
		}
	}
}

// Tokens returns the number of tokens available at instant now. It is
// fractional between refills, and negative if now is earlier than instants
// whose tokens were already taken.
func (l *Limiter) Tokens(now time.Time) float64 {
	s, c := l.load()
	tat, _ := unpack(s)
	return c.tokens(tat, l.at(now))
}

// RetryAfter returns how long after instant now n tokens will be available,
// or 0 if they are available now. It takes nothing. It returns
// math.MaxInt64 (as a Duration) when they can never be: n above the burst,
// or a rate of 0 with too few tokens left.
func (l *Limiter) RetryAfter(now time.Time, n int) time.Duration {
	return time.Duration(l.retryAfter(l.at(now), n))
}

func (l *Limiter) retryAfter(now int64, n int) int64 {
	s, c := l.load()
	if c.inf || n <= 0 {
		return 0
	}
	if n > c.burstEff {
		return math.MaxInt64
	}
	tat, _ := unpack(s)
	t := c.clock(now)
	wait := max(tat, t) + int64(n)*c.interval - t - c.tau
	if wait <= 0 {
		return 0
	}
	if c.frozen {
		return math.MaxInt64
	}
	return wait
}

// Limit returns the configured rate, before scaling.
func (l *Limiter) Limit() Limit { return l.cfg.Load().limit }

// Burst returns the configured burst, before scaling.
func (l *Limiter) Burst() int { return l.cfg.Load().burst }

// Scale returns the current scale factor, 1 unless SetScale changed it.
func (l *Limiter) Scale() float64 { return l.cfg.Load().scale }

// EffectiveLimit returns the rate in force: Limit × Scale (Inf stays Inf).
func (l *Limiter) EffectiveLimit() Limit {
	c := l.cfg.Load()
	if c.inf {
		return Inf
	}
	return c.limit * Limit(c.scale)
}

// EffectiveBurst returns the burst in force: Burst × Scale, rounded down,
// at least 1.
func (l *Limiter) EffectiveBurst() int { return l.cfg.Load().burstEff }

// SetLimit is shorthand for SetLimitAt(time.Now(), r).
func (l *Limiter) SetLimit(r Limit) error { return l.SetLimitAt(time.Now(), r) }

// SetLimitAt sets the rate at instant now. The tokens earned up to now are
// kept; refill continues at the new rate. If r is negative or NaN it
// returns an error and changes nothing.
func (l *Limiter) SetLimitAt(now time.Time, r Limit) error {
	if err := checkLimit("SetLimit", r); err != nil {
		return err
	}
	l.reconfigure(l.at(now), func(c *bucketConfig) { c.limit = r })
	return nil
}

// SetBurst is shorthand for SetBurstAt(time.Now(), b).
func (l *Limiter) SetBurst(b int) error { return l.SetBurstAt(time.Now(), b) }

// SetBurstAt sets the burst at instant now. The tokens earned up to now are
// kept, capped at the new burst. If b < 1 it returns an error and changes
// nothing.
func (l *Limiter) SetBurstAt(now time.Time, b int) error {
	if err := checkBurst("SetBurst", b); err != nil {
		return err
	}
	l.reconfigure(l.at(now), func(c *bucketConfig) { c.burst = b })
	return nil
}

// SetScale is shorthand for SetScaleAt(time.Now(), f).
func (l *Limiter) SetScale(f float64) error { return l.SetScaleAt(time.Now(), f) }

// SetScaleAt sets the scale factor at instant now: the rate in force becomes
// Limit × f and the burst Burst × f (rounded down, at least 1). The tokens
// earned up to now are kept, capped at the scaled burst. SetScaleAt(now, 1)
// restores the configured values. Unless 0 < f ≤ 1 it returns an error and
// changes nothing. It implements loadshed.Target.
func (l *Limiter) SetScaleAt(now time.Time, f float64) error {
	if err := checkScale("SetScale", f); err != nil {
		return err
	}
	l.reconfigure(l.at(now), func(c *bucketConfig) { c.scale = f })
	return nil
}

// reconfigure publishes a new configuration and converts the state to it.
// Admissions that race with it either land before the conversion (their
// state word is converted) or wait in load until it is done.
func (l *Limiter) reconfigure(now int64, edit func(*bucketConfig)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.cfg.Load()
	nc, changed := old.next(edit)
	if !changed {
		return
	}
	l.cfg.Store(nc)
	for {
		s := l.state.Load()
		tat, _ := unpack(s)
		if l.state.CompareAndSwap(s, pack(convert(old, nc, tat, now), nc.gen)) {
			return
		}
	}
}

// Wait is shorthand for WaitN(ctx, 1).
func (l *Limiter) Wait(ctx context.Context) error { return l.WaitN(ctx, 1) }

// WaitN blocks until n tokens can be taken, takes them and returns nil.
//
// It returns an error, taking nothing, if n exceeds the burst (unless the
// limit is Inf), if ctx is already done, if the wait would outlast ctx's
// deadline (ErrWouldExceedDeadline), or if the rate is 0 and the bucket
// lacks the tokens (ErrNeverAvailable). If ctx is done while waiting, the
// tokens are given back as RefundAt gives them (n tokens of the
// configuration in force then, if a Set method changed it meanwhile) and
// ctx's error is returned. With n ≤ 0 it returns
// nil at once unless ctx is done.
func (l *Limiter) WaitN(ctx context.Context, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if n <= 0 {
		return nil
	}
	for {
		s, c := l.load()
		if c.inf {
			return nil
		}
		if n > c.burstEff {
			return fmt.Errorf("ratelimit: Wait(n=%d) exceeds limiter's burst %d", n, c.burstEff)
		}
		now := l.now()
		tat, _ := unpack(s)
		t := c.clock(now)
		newTat := max(tat, t) + int64(n)*c.interval
		wait := newTat - t - c.tau
		if wait > 0 && c.frozen {
			return fmt.Errorf("ratelimit: Wait(n=%d): %w", n, ErrNeverAvailable)
		}
		if dl, ok := ctx.Deadline(); ok && wait > 0 && wait > l.at(dl)-now {
			return fmt.Errorf("ratelimit: Wait(n=%d): %w", n, ErrWouldExceedDeadline)
		}
		if !l.state.CompareAndSwap(s, pack(newTat, c.gen)) {
			continue
		}
		if wait <= 0 {
			return nil
		}
		timer := time.NewTimer(time.Duration(wait))
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			timer.Stop()
			refundWord(&l.state, l.cfg.Load, l.now(), n)
			return ctx.Err()
		}
	}
}

// Refund is shorthand for RefundAt(time.Now(), n).
func (l *Limiter) Refund(n int) { l.RefundAt(time.Now(), n) }

// RefundAt gives back n tokens taken earlier for an event that did not
// happen (a later check refused it, say), at instant now. The bucket never
// holds more than its burst, so tokens that refilled meanwhile are not given
// twice; n ≤ 0 does nothing. Tokens taken under a configuration that has
// since changed are converted with the bucket, and a refund then gives back
// n tokens of the new configuration.
func (l *Limiter) RefundAt(now time.Time, n int) {
	if n <= 0 {
		return
	}
	refundWord(&l.state, l.cfg.Load, l.at(now), n)
}

// refundWord lowers the theoretical arrival time of the bucket word w by n
// tokens, never below the present.
func refundWord(w *atomic.Int64, cfg func() *bucketConfig, now int64, n int) {
	for {
		s := w.Load()
		c := cfg()
		if s&genMask != c.gen {
			runtime.Gosched()
			continue
		}
		if c.inf {
			return
		}
		tat, _ := unpack(s)
		t := c.clock(now)
		newTat := max(tat-int64(min(n, c.burstEff))*c.interval, t)
		if newTat >= tat || w.CompareAndSwap(s, pack(newTat, c.gen)) {
			return
		}
	}
}
