package redislimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/breaker"
)

// Defaults of WithLeases.
const (
	// DefaultLeaseHorizon is how much of a replica's own traffic one lease
	// covers: a quarter of a second, so that a replica with 100 calls/s
	// of a key asks Redis about 8 times a second for it.
	DefaultLeaseHorizon = 250 * time.Millisecond
	// DefaultLeaseTTL is how long leased tokens stay usable.
	DefaultLeaseTTL = time.Second
	// DefaultMaxLeases bounds the keys leased at once; further keys are
	// decided in direct mode.
	DefaultMaxLeases = 10_000
)

// refillWorkers is how many goroutines refill leases: rueidis pipelines
// their round trips on one connection.
const refillWorkers = 4

type leaseOptions struct {
	horizon time.Duration
	ttl     time.Duration
	maxKeys int
}

// WithLeases turns leases on: the replica takes each key's tokens from
// Redis in batches that cover horizon of its own recent traffic on the key
// (at most the shared burst ÷ the replicas alive), refills a lease in the
// background when half of it is spent, so that calls seldom wait on
// Redis, and drops the tokens it has not spent within ttl. Redis then sees
// about two round trips per horizon per key and replica instead of one per
// call. Default off; horizon must be in [1ms, 10s] and ttl in
// [horizon, 1m]. Keys beyond DefaultMaxLeases are decided in direct mode.
//
// Leases suit keys whose traffic is steady over a horizon: a batch holds
// about rate × horizon ÷ replicas tokens, so with rate × horizon near 1 a
// quick burst of calls finds the lease dry, and is refused while its
// refill is on the way, though the shared bucket may hold more.
//
// The fleet never takes more tokens from Redis than the shared bucket
// allows; a token may be spent up to ttl after it was taken, so over any
// interval t the fleet admits at most burst + rate × t plus the tokens in
// hand at the interval's start (at most about one batch per replica and
// key).
func WithLeases(horizon, ttl time.Duration) Option {
	return func(o *options) {
		o.leased = true
		o.lease.horizon, o.lease.ttl = horizon, ttl
		if o.lease.maxKeys == 0 {
			o.lease.maxKeys = DefaultMaxLeases
		}
	}
}

func (o *leaseOptions) validate() error {
	var errs []error
	if o.horizon < time.Millisecond || o.horizon > 10*time.Second {
		errs = append(errs, fmt.Errorf("redislimit: WithLeases: horizon must be in [1ms, 10s], got %v", o.horizon))
	}
	if o.ttl < o.horizon || o.ttl > time.Minute {
		errs = append(errs, fmt.Errorf("redislimit: WithLeases: ttl must be in [horizon, 1m], got %v", o.ttl))
	}
	return errors.Join(errs...)
}

// leaseID names a leased bucket: a guard by method sets method; the
// bucket's name is composed once, when its lease is made.
type leaseID struct {
	method, key string
	scope       Scope
}

// name is the bucket's name, as the guard composes it in direct mode.
func (id leaseID) name() string {
	switch id.scope & (ByKey | ByMethod) {
	case ByMethod:
		return id.method
	case ByKey | ByMethod:
		return id.method + "|" + id.key
	}
	return id.key
}

// lease is one replica's tokens of one bucket. Callers only touch tokens
// (and, when it runs dry, the slow path); the rest belongs to whoever
// holds mu: a refill or the sweeper.
type lease struct {
	tokens atomic.Int64 // tokens in hand; briefly negative while a taker backs off
	low    atomic.Int64 // refill when tokens fall to this
	queued atomic.Bool  // a refill is queued, running or scheduled
	until  atomic.Int64 // ns on the limiter's clock before which Redis has no token for us
	dry    atomic.Int64 // calls that found the lease dry since the last refill

	mu      sync.Mutex
	name    string
	granted int64   // tokens in hand right after the last refill
	last    int64   // ns of the last refill
	expires int64   // ns after which unspent tokens are dropped
	rate    float64 // the replica's recent rate on the bucket, tokens/s
	seen    int64   // tokens at the sweeper's last look, to find idle leases
	idle    int     // sweeps since tokens last moved
	gone    bool    // forgotten by the sweeper: never refilled again
	_       [32]byte
}

// leaseShard is a copy-on-write map: callers read it without a lock (a
// read lock's counter would be one more contended word per call), and the
// rare writers — a new key, a forgotten one — copy it under mu.
type leaseShard struct {
	m  atomic.Pointer[map[leaseID]*lease]
	mu sync.Mutex
	_  [48]byte
}

// leases is a limiter's table of leases, sharded by key, with the
// goroutines that refill and sweep them.
type leases struct {
	o       leaseOptions
	seed    maphash.Seed
	shards  []leaseShard
	count   atomic.Int64
	refills chan *lease
	wg      sync.WaitGroup
	epoch   time.Time

	refilled, dropped atomic.Uint64
	// granted counts the tokens refills put in leases, added after the
	// tokens (and dropped before they are taken away), so that spent never
	// counts a token twice.
	granted atomic.Uint64
	// spentMax is the largest spent ever returned, which keeps it a
	// counter (never going back) across reads racing an expiry.
	spentMax atomic.Uint64

	mu      sync.Mutex
	delayed []*lease // refills due at their lease's until
}

func newLeases(o leaseOptions) *leases {
	ls := &leases{o: o, seed: maphash.MakeSeed(), shards: make([]leaseShard, 64), refills: make(chan *lease, 1024), epoch: time.Now()}
	for i := range ls.shards {
		m := make(map[leaseID]*lease)
		ls.shards[i].m.Store(&m)
	}
	return ls
}

func (ls *leases) shard(id leaseID) *leaseShard {
	h := maphash.String(ls.seed, id.key)
	if id.method != "" {
		h = h*31 + maphash.String(ls.seed, id.method)
	}
	return &ls.shards[h&63]
}

// get returns id's lease, making it if there is room; nil when there is
// none (the call is then decided in direct mode).
func (ls *leases) get(id leaseID) *lease {
	sh := ls.shard(id)
	if lz := (*sh.m.Load())[id]; lz != nil {
		return lz
	}
	return ls.make(sh, id)
}

func (ls *leases) make(sh *leaseShard, id leaseID) *lease {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := *sh.m.Load()
	if lz := old[id]; lz != nil {
		return lz
	}
	if ls.count.Load() >= int64(ls.o.maxKeys) {
		return nil
	}
	lz := &lease{name: id.name()}
	m := make(map[leaseID]*lease, len(old)+1)
	maps.Copy(m, old)
	m[id] = lz
	sh.m.Store(&m)
	ls.count.Add(1)
	return lz
}

// take spends one token of lz's lease on the admitted path: one atomic
// add, and a refill queued when the lease reaches its low-water mark. It
// reports false when the lease is dry.
func (l *Limiter) take(lz *lease) (left int64, ok bool) {
	n := lz.tokens.Add(-1)
	if n < 0 {
		lz.tokens.Add(1)
		return 0, false
	}
	if n <= lz.low.Load() && !lz.queued.Load() && lz.queued.CompareAndSwap(false, true) {
		select {
		case l.ls.refills <- lz:
		default:
			lz.queued.Store(false) // the workers are behind: a later call queues it
		}
	}
	return n, true
}

// leased decides one call of id in leased mode: a token from the lease,
// or, when it is dry, a refill by the caller (the first call of a key, or
// traffic that outran the refills), a local refusal while Redis has
// nothing for us, or the local fallback while Redis is sick or when ctx
// is already done (as in direct mode: no round trip for a caller who gave
// up).
func (l *Limiter) leased(ctx context.Context, id leaseID, lz *lease) (Result, *lease) {
	if n, ok := l.take(lz); ok {
		return Result{Allowed: true, Remaining: int(n)}, lz
	}
	lz.dry.Add(1)
	if l.closed.Load() {
		return l.direct(ctx, id.name(), 1), nil
	}
	now := l.o.now()
	mono := l.ls.mono(now)
	if ctx.Err() != nil || l.br.StateAt(now) != breaker.StateClosed {
		return l.fallback(id.name(), now, 1), nil
	}
	if until := lz.until.Load(); mono < until {
		l.refused.Add(1)
		return Result{RetryAfter: time.Duration(until - mono)}, nil
	}
	if lz.queued.Load() || !lz.queued.CompareAndSwap(false, true) {
		// A refill is on its way: do not ask Redis twice.
		l.refused.Add(1)
		return Result{RetryAfter: time.Duration(l.interval)}, nil
	}
	if err := l.refill(lz); err == errForgotten {
		// The sweeper forgot the lease after this call found it: a batch
		// put in it now would be lost (no call finds it, no expiry drops
		// it). The key's next call makes a fresh lease.
		return l.direct(ctx, id.name(), 1), nil
	} else if err != nil {
		return l.fallback(id.name(), now, 1), nil
	}
	if n, ok := l.take(lz); ok {
		// Counted in Stats.LeaseAllowed, as every token taken from a lease.
		return Result{Allowed: true, Remaining: int(n)}, lz
	}
	l.refused.Add(1)
	retry := time.Duration(lz.until.Load() - l.ls.mono(l.o.now()))
	return Result{RetryAfter: max(retry, time.Duration(l.interval))}, nil
}

// spent returns the tokens taken from leases since New: those granted,
// less those dropped and those in hand. It reads every lease, for Stats,
// so that the admitted path counts nothing beyond its one atomic add. A
// lease is forgotten only when it holds no token, and is never refilled
// after (refill), so forgotten leases need no account.
func (ls *leases) spent() uint64 {
	// Read the counters before the tokens: a refill adds its tokens
	// before it counts them, so a read racing one errs low. A read racing
	// an expiry (rare: idle leases, at their time to live) may err high by
	// the tokens dropped; spentMax then holds the figure until the spends
	// catch up, so that the result never goes back.
	granted, dropped := ls.granted.Load(), ls.dropped.Load()
	var held uint64
	for i := range ls.shards {
		for _, lz := range *ls.shards[i].m.Load() {
			held += uint64(max(lz.tokens.Load(), 0))
		}
	}
	var n uint64
	if granted > dropped+held {
		n = granted - dropped - held
	}
	for {
		prev := ls.spentMax.Load()
		if n <= prev {
			return prev
		}
		if ls.spentMax.CompareAndSwap(prev, n) {
			return n
		}
	}
}

func (ls *leases) mono(t time.Time) int64 { return int64(t.Sub(ls.epoch)) }

// errForgotten is refill's error for a lease the sweeper has forgotten.
var errForgotten = errors.New("redislimit: lease forgotten")

// refill tops lz up from Redis, through the breaker, sizing the batch from
// the replica's recent traffic on the bucket; lz.queued must be set, and
// is cleared, or kept while the refill is scheduled for later. It asks
// nothing of Redis for a lease the sweeper has forgotten (errForgotten):
// a call may still hold one, but its batch would be lost.
func (l *Limiter) refill(lz *lease) error {
	now := l.o.now()
	mono := l.ls.mono(now)
	if until := lz.until.Load(); mono < until {
		l.ls.mu.Lock()
		l.ls.delayed = append(l.ls.delayed, lz)
		l.ls.mu.Unlock()
		return nil
	}
	defer lz.queued.Store(false)
	lz.mu.Lock()
	defer lz.mu.Unlock()
	if lz.gone {
		return errForgotten
	}
	held := max(lz.tokens.Load(), 0)
	if lz.last != 0 {
		elapsed := float64(mono-lz.last) / 1e9
		demand := float64(max(lz.granted-held, 0) + lz.dry.Swap(0))
		if elapsed > 0 {
			r := demand / elapsed
			if lz.rate == 0 {
				lz.rate = r
			} else {
				lz.rate = 0.5*lz.rate + 0.5*r
			}
		}
	} else {
		lz.rate = l.rate / float64(l.Replicas())
	}
	maxBatch := max(1, int64(l.burst)/int64(l.Replicas()))
	batch := min(max(1, int64(math.Ceil(lz.rate*l.o.lease.horizon.Seconds()))), maxBatch)
	want := batch - held
	lz.low.Store(batch / 2)
	if want <= 0 {
		return nil
	}
	p, err := l.br.AllowAt(now)
	if err != nil {
		return err
	}
	start := time.Now()
	v, err := l.run3(l.dl.get(), lz.name, strconv.FormatInt(want, 10), "1")
	p.Done(err, time.Since(start))
	if err != nil {
		l.errors.Add(1)
		return err
	}
	l.ls.refilled.Add(1)
	got := v[0]
	lz.tokens.Add(got)
	l.ls.granted.Add(uint64(got))
	lz.granted = held + got
	lz.last = mono
	lz.expires = mono + int64(l.o.lease.ttl)
	if got < want {
		// The shared bucket is short: come back when it may hold what we
		// missed, not at every token, or Redis would see every call; wait a
		// horizon, or the time the bucket takes to fill half when that is
		// shorter, so that no token is lost to a full bucket meanwhile.
		fill := float64(l.burst) * float64(l.interval) / 2 // ns; no overflow in float
		wait := max(time.Duration(v[1])*time.Microsecond, time.Duration(min(float64(l.o.lease.horizon), fill)))
		lz.until.Store(mono + int64(wait))
	}
	return nil
}

// refiller is one of the goroutines that refill queued leases.
func (l *Limiter) refiller() {
	defer l.ls.wg.Done()
	for {
		select {
		case <-l.stop:
			return
		case lz := <-l.ls.refills:
			_ = l.refill(lz)
		}
	}
}

// sweeper queues the refills scheduled for later, every horizon ÷ 4, and
// every ttl ÷ 4 drops the tokens of leases past their time to live and
// forgets leases that have been dry and idle for a while.
func (l *Limiter) sweeper() {
	defer l.ls.wg.Done()
	every := max(l.o.lease.horizon/4, time.Millisecond)
	passEvery := max(int(l.o.lease.ttl/4/every), 1)
	t := time.NewTicker(every)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		now := l.ls.mono(l.o.now())
		l.ls.due(now)
		if i%passEvery == 0 {
			l.ls.expire(now)
		}
	}
}

// due queues the scheduled refills whose time has come.
func (ls *leases) due(now int64) {
	ls.mu.Lock()
	var due []*lease
	keep := ls.delayed[:0]
	for _, lz := range ls.delayed {
		if now >= lz.until.Load() {
			due = append(due, lz)
		} else {
			keep = append(keep, lz)
		}
	}
	clear(ls.delayed[len(keep):])
	ls.delayed = keep
	ls.mu.Unlock()
	for _, lz := range due {
		select {
		case ls.refills <- lz:
		default:
			lz.queued.Store(false) // a later call queues it again
		}
	}
}

// idlePasses is how many expiry passes a dry lease stays unused before it
// is forgotten.
const idlePasses = 8

// expire drops the unspent tokens of leases past their time to live and
// forgets the leases that stayed dry and unused for idlePasses passes.
func (ls *leases) expire(now int64) {
	for i := range ls.shards {
		sh := &ls.shards[i]
		var idle []leaseID
		for id, lz := range *sh.m.Load() {
			lz.mu.Lock()
			t := lz.tokens.Load()
			if lz.expires != 0 && now >= lz.expires {
				// Taken in one step against a take (one atomic add, no
				// lock): a token is either spent or dropped, never both.
				for ; t > 0; t = lz.tokens.Load() {
					if lz.tokens.CompareAndSwap(t, 0) {
						ls.dropped.Add(uint64(t))
						t = 0
						break
					}
				}
			}
			if t == lz.seen && !lz.queued.Load() {
				lz.idle++
			} else {
				lz.seen, lz.idle = t, 0
			}
			if lz.idle > idlePasses && t <= 0 {
				// Marked under lz.mu, before it leaves the table: a refill
				// (which holds lz.mu) either came before, and its tokens
				// are in t, or finds the lease gone and asks Redis for
				// nothing.
				lz.gone = true
				idle = append(idle, id)
			}
			lz.mu.Unlock()
		}
		if len(idle) > 0 {
			sh.mu.Lock()
			m := maps.Clone(*sh.m.Load())
			for _, id := range idle {
				if _, ok := m[id]; ok {
					delete(m, id)
					ls.count.Add(-1)
				}
			}
			sh.m.Store(&m)
			sh.mu.Unlock()
		}
	}
}
