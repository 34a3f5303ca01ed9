// Package bulkhead limits how many calls run at once.
//
// A Bulkhead is a fixed limit (seed 002's semaphore, done properly): TryAcquire
// fails fast when every slot is taken, and Acquire may wait in a bounded
// FIFO queue for a bounded time. An Adaptive is a limit that follows
// measured latency (TCP Vegas style) for bottlenecks that are not the CPU:
// a database pool, a downstream service, a disk.
//
// Both hand out a Permit, a small value that the caller finishes exactly
// once:
//
//	p, ok := b.TryAcquire()
//	if !ok {
//		return errOverloaded // refused in nanoseconds, no allocation
//	}
//	start := time.Now()
//	err := work()
//	p.Done(time.Since(start), err)
//
// Finishing is idempotent: a second Release or Done of the same permit, or
// of a copy, is a no-op that returns false, so the in-flight count can
// never be released twice or drop below zero.
//
// Admission and release are lock-free while nobody is queued: a
// compare-and-swap (admission) or an atomic add (release) on a word holding
// the in-flight and queued counts, and one on the generation of the slot
// the call claims (there are twice as many slots as the largest limit ever
// set, so a probe from a random start finds a free one in about two
// tries). Nothing allocates on that path. Queued
// Acquire calls take a mutex and allocate their wait entry; a slot freed
// while calls are queued goes straight to the oldest of them.
//
// Errors: ErrFull when there is no slot and no room in the queue;
// an error wrapping ErrTimeout after the maximum wait; an error wrapping
// the context's error (and cause) when the context ends first.
//
// Invalid configuration (limit < 1, negative queue length or maximum wait,
// a floor above the ceiling) is an error from New, NewAdaptive or
// SetLimit naming every bad value, and nothing is built or changed;
// nothing is silently clamped except WithInitialLimit into
// WithLimitBounds.
//
// The package imports only the standard library and starts no goroutines.
package bulkhead
