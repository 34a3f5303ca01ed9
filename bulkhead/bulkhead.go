package bulkhead

import (
	"context"
	"errors"
)

// Bulkhead is a fixed limit on the number of calls in flight.
//
// TryAcquire fails fast when every slot is taken; Acquire may instead wait
// in a bounded FIFO queue (WithQueue) for at most a maximum wait
// (WithMaxWait). A slot freed while calls are queued goes straight to the
// oldest of them: neither TryAcquire nor a new Acquire can take it first.
//
// Create one with New; by default it has no queue and no maximum wait.
// The zero value has a limit of 0 and refuses every call until SetLimit
// raises it. A Bulkhead is safe for concurrent use; TryAcquire, and the release
// of a permit while nobody is queued, take no lock and allocate nothing.
type Bulkhead struct {
	c core
}

// New returns a Bulkhead that admits at most limit calls at once.
// Options: WithQueue (default no queue) and WithMaxWait (default none).
//
// New returns an error naming every bad value if limit is outside
// [1, MaxLimit], if an option is given an invalid value (negative queue
// length or maximum wait), or if an adaptive-only option is passed.
func New(limit int, opts ...Option) (*Bulkhead, error) {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := errors.Join(checkLimit("New", limit), o.validate("New", false)); err != nil {
		return nil, err
	}
	b := new(Bulkhead)
	b.c.init(limit, &o)
	return b, nil
}

// TryAcquire admits the call if a slot is free and nobody is queued, and
// otherwise returns ok == false at once (counted in Stats.Refused). It
// never blocks, takes no lock and allocates nothing.
func (b *Bulkhead) TryAcquire() (p Permit, ok bool) { return b.c.tryAcquire() }

// Acquire admits the call, waiting in FIFO order if every slot is taken
// and the queue has room. It returns ErrFull at once when the queue is
// full (or there is none); an error wrapping ErrTimeout after the maximum
// wait; and, if ctx ends first, an error wrapping ctx.Err() (so
// errors.Is(err, context.Canceled) works). A context already ended is
// refused even when a slot is free. A slot granted at the very moment the
// caller gives up is passed on to the next waiter, never lost.
func (b *Bulkhead) Acquire(ctx context.Context) (Permit, error) { return b.c.acquire(ctx) }

// SetLimit changes the limit while calls are running. Growing it admits
// queued calls at once; shrinking it lets the calls in flight finish and
// admits no new one until the count is below the new limit. If n is
// outside [1, MaxLimit] it returns an error and changes nothing.
func (b *Bulkhead) SetLimit(n int) error {
	if err := checkLimit("SetLimit", n); err != nil {
		return err
	}
	b.c.setLimit(n)
	return nil
}

// Limit returns the current limit.
func (b *Bulkhead) Limit() int { return int(b.c.limit.Load()) }

// InFlight returns the number of calls holding a slot. It may exceed
// Limit for a while after SetLimit shrank the limit.
func (b *Bulkhead) InFlight() int { return b.c.inFlight() }

// Waiting returns the number of Acquire calls queued for a slot.
func (b *Bulkhead) Waiting() int { return b.c.waiting() }

// Stats returns the cumulative counters. It reads atomics only, but its
// cost grows with the largest limit ever set (it sums per-slot counters,
// which keeps admission free of a shared counter); call it at scrape
// time, not per request.
func (b *Bulkhead) Stats() Stats { return b.c.stats() }
