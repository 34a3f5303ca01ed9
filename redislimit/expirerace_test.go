package redislimit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLeaseExpireRacesTake: leases.expire drops an expired lease's tokens
// while takers spend them: every token is either spent or dropped, once
// (admitted + dropped == granted), and a quiet lease holds >= 0 tokens.
// Before, expire dropped them with a Load then an Add(-t), and a take
// between the two was admitted and counted dropped too, leaving the lease
// at -1 (the next refill's batch a token short). A race on atomics, not a
// data race: it is caught by repetition (a second of it).
func TestLeaseExpireRacesTake(t *testing.T) {
	l := &Limiter{ls: newLeases(leaseOptions{horizon: time.Millisecond, ttl: time.Millisecond, maxKeys: 10})}
	lz := l.ls.get(leaseID{key: "k", scope: ByKey})
	lz.low.Store(-1) // never queue a refill: no worker runs here
	const n = 64
	deadline := time.Now().Add(time.Second)
	for iter := 0; time.Now().Before(deadline); iter++ {
		lz.mu.Lock()
		lz.expires, lz.seen, lz.idle = 1, -1, 0 // expired; not idle, so never forgotten
		lz.mu.Unlock()
		lz.tokens.Store(n)
		dropped0 := l.ls.dropped.Load()
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for {
					if _, ok := l.take(lz); !ok {
						return
					}
					admitted.Add(1)
				}
			}()
		}
		close(start)
		l.ls.expire(2) // now (2) >= expires (1): drops what is in hand
		wg.Wait()
		dropped := int64(l.ls.dropped.Load() - dropped0)
		if got := lz.tokens.Load(); got < 0 || admitted.Load()+dropped != n {
			t.Fatalf("iteration %d: %d tokens granted, %d admitted + %d dropped = %d, lease left at %d; want every token spent or dropped exactly once and the lease at >= 0",
				iter, n, admitted.Load(), dropped, admitted.Load()+dropped, got)
		}
	}
}
