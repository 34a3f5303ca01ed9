package redislimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlines hands out the contexts that bound the callers' round trips.
// A context per call would cost a runtime timer per call, which from many
// goroutines is a good part of a round trip's overhead; instead the calls
// that start within the same slice of the timeout (a tenth of it) share
// one context, whose deadline is the timeout after the slice began. A
// call's bound is so between 0.9 and 1 times the timeout.
type deadlines struct {
	timeout time.Duration
	epoch   time.Time
	cur     atomic.Pointer[sharedDeadline]
	mu      sync.Mutex // serialises the making of a new one
}

type sharedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc // called by Close; the deadline ends the rest
	until  int64              // ns since epoch after which it is not handed out
}

func newDeadlines(timeout time.Duration) *deadlines {
	return &deadlines{timeout: timeout, epoch: time.Now()}
}

// get returns a context that ends at most the timeout from now, and at
// least 0.9 of it.
func (d *deadlines) get() context.Context {
	now := int64(time.Since(d.epoch))
	if s := d.cur.Load(); s != nil && now < s.until {
		return s.ctx
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.cur.Load(); s != nil && now < s.until {
		return s.ctx
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	d.cur.Store(&sharedDeadline{ctx: ctx, cancel: cancel, until: now + int64(d.timeout/10)})
	return ctx
}

// stop releases the current context's timer; a later get makes a new
// one.
func (d *deadlines) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.cur.Swap(nil); s != nil {
		s.cancel()
	}
}
