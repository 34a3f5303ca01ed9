package inventory

import (
	"context"
	"sync/atomic"
	"time"
)

// database is the simulated database behind Allocate (WithDatabase): a pool
// of cap(conns) connections, each query holding one for latency. A call that
// finds every connection taken waits for one, in arrival order: blocked
// senders on a channel are served first come, first served, and a released
// slot goes straight to the longest waiter, so a newcomer cannot overtake
// it. It is safe for concurrent use and starts no goroutines.
type database struct {
	conns   chan struct{} // one token per connection in use
	latency time.Duration

	inUse     atomic.Int64 // tokens held, counted after taking and before giving back
	peakInUse atomic.Int64
	waiting   atomic.Int64
	waited    atomic.Uint64
	waitNanos atomic.Int64
	queries   atomic.Uint64
	gaveUp    atomic.Uint64 // contexts that ended while waiting for a connection
	cutShort  atomic.Uint64 // contexts that ended during a query
}

func newDatabase(conns int, latency time.Duration) *database {
	return &database{conns: make(chan struct{}, conns), latency: latency}
}

// acquire takes a connection, waiting for one while ctx lasts. It returns
// ctx's error, holding nothing, when ctx ends first or had ended already.
// now times the wait; a call served at once does not read it.
func (db *database) acquire(ctx context.Context, now func() time.Time) error {
	if err := ctx.Err(); err != nil {
		db.gaveUp.Add(1)
		return err
	}
	select {
	case db.conns <- struct{}{}:
	default:
		start := now()
		db.waited.Add(1)
		db.waiting.Add(1)
		var err error
		select {
		case db.conns <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
		}
		db.waiting.Add(-1)
		db.waitNanos.Add(int64(now().Sub(start)))
		if err != nil {
			db.gaveUp.Add(1)
			return err
		}
	}
	n := db.inUse.Add(1)
	for {
		peak := db.peakInUse.Load()
		if n <= peak || db.peakInUse.CompareAndSwap(peak, n) {
			return nil
		}
	}
}

// release gives back the connection taken by a successful acquire.
func (db *database) release() {
	db.inUse.Add(-1)
	<-db.conns
}

// query holds the caller's connection for the latency, a timer wait that
// burns no CPU, and returns ctx's error if ctx ends first.
func (db *database) query(ctx context.Context) error {
	if db.latency > 0 {
		t := time.NewTimer(db.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			db.cutShort.Add(1)
			return ctx.Err()
		}
	}
	db.queries.Add(1)
	return nil
}
