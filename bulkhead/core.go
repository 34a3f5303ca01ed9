package bulkhead

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// MaxLimit is the largest concurrency limit a Bulkhead or an Adaptive
// accepts.
const MaxLimit = 1 << 20

// MaxQueue is the largest wait-queue length WithQueue accepts.
const MaxQueue = 1 << 30

const (
	inflightMask = 1<<32 - 1
	oneWaiter    = 1 << 32
	chunkBits    = 6
	chunkSize    = 1 << chunkBits
)

// slot is one unit of concurrency. A Permit names a slot and the slot's
// generation when it was handed out; gen is odd while the slot is held and
// even while it is free, so (gen+1)/2 counts the admissions through it and
// a Permit whose generation is stale can never free a slot again. A call
// takes a slot by moving its generation from even to odd.
type slot struct {
	gen atomic.Uint64
	c   *core
}

type chunk [chunkSize]slot

// waiter is one queued Acquire. All fields but ready are guarded by core.mu.
type waiter struct {
	ready      chan struct{} // closed when granted
	granted    bool
	prev, next *waiter
}

// core is the semaphore shared by Bulkhead and Adaptive.
//
// The admission word state holds the in-flight count (low 32 bits) and the
// number of queued waiters (high 32 bits). TryAcquire is a compare-and-swap
// on it and a release an atomic add; everything that involves waiters runs
// under mu, and waiters only change under mu. A non-zero waiter count makes
// lock-free admission refuse (no barging past the queue), and a release
// that sees one hands the freed place on under mu.
//
// A call counted in state then claims a slot: from a random start, it takes
// the first free slot. A slot is freed before the count drops and claimed
// after it rose, so the slots held never outnumber the count, and there are
// at least twice as many slots as the largest limit ever set: at least half
// are free, so a claim takes about two probes on average, and calls on
// different CPUs mostly claim different slots instead of contending for the
// head of a shared free list.
type core struct {
	state atomic.Uint64
	_     [64 - 8]byte

	limit   atomic.Int64
	table   atomic.Pointer[[]*chunk]
	ad      *Adaptive // nil for a fixed Bulkhead
	_       [64 - 24]byte
	refused atomic.Uint64
	_       [64 - 8]byte

	timedOut atomic.Uint64
	canceled atomic.Uint64

	maxQueue   uint64
	maxWait    time.Duration
	errTimeout error

	mu         sync.Mutex
	head, tail *waiter
	nslots     int

	// Test hooks, nil in production.
	newTimer func(d time.Duration) (<-chan time.Time, func() bool)
	onGiveUp func() // runs when a waiter gives up, before it takes mu
}

func (c *core) init(limit int, o *options) {
	c.maxQueue = uint64(o.queue)
	c.maxWait = o.maxWait
	if o.maxWait > 0 {
		c.errTimeout = fmt.Errorf("%w (max wait %v)", ErrTimeout, o.maxWait)
	}
	c.setLimit(limit)
}

// checkLimit validates a limit given to the constructor or setter fn.
func checkLimit(fn string, n int) error {
	if n < 1 || n > MaxLimit {
		return fmt.Errorf("bulkhead: %s: limit must be between 1 and %d, got %d", fn, MaxLimit, n)
	}
	return nil
}

// claim takes a free slot for a call already counted in state. A table
// that grew during the probe may have had its old slots taken by calls
// admitted under the new limit, so the probe reloads the table whenever it
// wraps: the current table always has free slots.
func (c *core) claim() Permit {
	t := *c.table.Load()
	n := uint64(len(t)) * chunkSize
	i := uint64(rand.Uint32()) * n >> 32 // uniform in [0, n)
	for {
		s := &t[i>>chunkBits][i&(chunkSize-1)]
		if g := s.gen.Load(); g&1 == 0 && s.gen.CompareAndSwap(g, g+1) {
			return Permit{s: s, gen: g + 1}
		}
		if i++; i == n {
			t = *c.table.Load()
			n, i = uint64(len(t))*chunkSize, 0
		}
	}
}

// admit counts one more call in flight unless the limit is reached or
// someone is queued.
func (c *core) admit() bool {
	lim := uint64(c.limit.Load())
	for {
		st := c.state.Load()
		if st>>32 != 0 || st&inflightMask >= lim {
			return false
		}
		if c.state.CompareAndSwap(st, st+1) {
			return true
		}
	}
}

func (c *core) tryAcquire() (Permit, bool) {
	if !c.admit() {
		c.refused.Add(1)
		return Permit{}, false
	}
	return c.claim(), true
}

// put drops the in-flight count after a slot was freed (or a granted
// waiter gave up before claiming one). If someone is queued, the freed
// place goes to the oldest waiter: while waiters exist no lock-free caller
// can take it (they see the waiter count), and dispatch runs after the
// decrement, so it sees the room.
func (c *core) put() {
	if st := c.state.Add(^uint64(0)); st>>32 != 0 {
		c.mu.Lock()
		c.dispatch()
		c.mu.Unlock()
	}
}

// grant hands w a place, already counted; w claims its slot when it wakes.
// Needs mu.
func (c *core) grant(w *waiter) {
	w.granted = true
	close(w.ready)
}

// dispatch admits waiters while there is room. Needs mu.
func (c *core) dispatch() {
	for {
		st := c.state.Load()
		if st>>32 == 0 || int64(st&inflightMask) >= c.limit.Load() {
			return
		}
		if c.state.CompareAndSwap(st, st+1-oneWaiter) {
			c.grant(c.dequeue())
		}
	}
}

func (c *core) enqueue(w *waiter) {
	w.prev = c.tail
	if c.tail == nil {
		c.head = w
	} else {
		c.tail.next = w
	}
	c.tail = w
}

func (c *core) dequeue() *waiter {
	w := c.head
	c.unlink(w)
	return w
}

func (c *core) unlink(w *waiter) {
	if w.prev == nil {
		c.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		c.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
}

// setLimit changes the limit, growing the slot table first if needed so
// that there are always at least twice as many slots as the limit.
func (c *core) setLimit(n int) {
	c.mu.Lock()
	if 2*n > c.nslots {
		c.grow(2 * n)
	}
	c.limit.Store(int64(n))
	c.dispatch()
	c.mu.Unlock()
}

// grow adds slots until there are at least n. Needs mu.
func (c *core) grow(n int) {
	var t []*chunk
	if p := c.table.Load(); p != nil {
		t = *p
	}
	nt := make([]*chunk, (n+chunkSize-1)/chunkSize)
	copy(nt, t)
	for i := len(t); i < len(nt); i++ {
		ch := new(chunk)
		for j := range ch {
			ch[j].c = c
		}
		nt[i] = ch
	}
	c.table.Store(&nt)
	c.nslots = len(nt) * chunkSize
}

func (c *core) acquire(ctx context.Context) (Permit, error) {
	if err := ctx.Err(); err != nil {
		c.canceled.Add(1)
		return Permit{}, ctxError(ctx, err)
	}
	if c.admit() {
		return c.claim(), nil
	}
	if c.maxQueue == 0 {
		c.refused.Add(1)
		return Permit{}, ErrFull
	}
	c.mu.Lock()
	for {
		st := c.state.Load()
		if st>>32 == 0 && int64(st&inflightMask) < c.limit.Load() {
			if c.state.CompareAndSwap(st, st+1) {
				c.mu.Unlock()
				return c.claim(), nil
			}
			continue
		}
		if st>>32 >= c.maxQueue {
			c.mu.Unlock()
			c.refused.Add(1)
			return Permit{}, ErrFull
		}
		if c.state.CompareAndSwap(st, st+oneWaiter) {
			break
		}
	}
	w := &waiter{ready: make(chan struct{})}
	c.enqueue(w)
	c.mu.Unlock()

	var timeout <-chan time.Time
	if c.maxWait > 0 {
		newTimer := c.newTimer
		if newTimer == nil {
			newTimer = realTimer
		}
		ch, stop := newTimer(c.maxWait)
		defer stop()
		timeout = ch
	}
	select {
	case <-w.ready:
		return c.claim(), nil
	case <-ctx.Done():
		c.giveUp(w)
		c.canceled.Add(1)
		return Permit{}, ctxError(ctx, ctx.Err())
	case <-timeout:
		c.giveUp(w)
		c.timedOut.Add(1)
		return Permit{}, c.errTimeout
	}
}

// giveUp takes w out of the queue, or, if a place was granted to w at the
// moment it gave up, passes that place on.
func (c *core) giveUp(w *waiter) {
	if c.onGiveUp != nil {
		c.onGiveUp()
	}
	c.mu.Lock()
	if w.granted {
		c.mu.Unlock()
		c.put()
		return
	}
	c.unlink(w)
	for {
		st := c.state.Load()
		if c.state.CompareAndSwap(st, st-oneWaiter) {
			break
		}
	}
	c.mu.Unlock()
}

func realTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

func ctxError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("bulkhead: gave up waiting for a slot: %w (cause: %w)", err, cause)
	}
	return fmt.Errorf("bulkhead: gave up waiting for a slot: %w", err)
}

func (c *core) inFlight() int { return int(c.state.Load() & inflightMask) }
func (c *core) waiting() int  { return int(c.state.Load() >> 32) }

func (c *core) stats() Stats {
	var admitted uint64
	if p := c.table.Load(); p != nil {
		for _, ch := range *p {
			for i := range ch {
				admitted += (ch[i].gen.Load() + 1) / 2
			}
		}
	}
	return Stats{
		Admitted: admitted,
		Refused:  c.refused.Load(),
		TimedOut: c.timedOut.Load(),
		Canceled: c.canceled.Load(),
	}
}

// Stats are cumulative counters of a Bulkhead or an Adaptive, read with
// atomic loads (for a metrics exporter). Counters never decrease. A Stats
// is a plain value with no lock of its own: safe to copy and to read from
// several goroutines, not to write from several at once. The zero value
// is the stats of a limit that has seen no call.
type Stats struct {
	Admitted uint64 // calls given a slot
	Refused  uint64 // TryAcquire false, or Acquire with ErrFull
	TimedOut uint64 // Acquire gave up after the maximum wait
	Canceled uint64 // Acquire gave up because its context ended
}
