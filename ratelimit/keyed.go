package ratelimit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Keyed.
const (
	// DefaultMaxKeys is the default cap on the number of keys a Keyed tracks.
	DefaultMaxKeys = 100_000
	// DefaultIdleTimeout is how long a bucket must have been full before
	// the sweeper evicts it.
	DefaultIdleTimeout = time.Minute
)

// KeyedOption configures a Keyed. An option only records its value;
// NewKeyed validates them all and reports every bad one.
// A nil KeyedOption is ignored.
type KeyedOption func(*keyedOptions)

type keyedOptions struct {
	maxKeys int
	idle    time.Duration
	sweep   time.Duration
	swept   bool // WithSweepInterval was given; else half the idle timeout, at least 1s
	shards  int
}

// validate reports every out-of-range option, each naming the option and
// its value.
func (o *keyedOptions) validate() error {
	var errs []error
	if o.maxKeys < 1 {
		errs = append(errs, fmt.Errorf("ratelimit: WithMaxKeys: max keys must be >= 1, got %d", o.maxKeys))
	}
	if o.idle < 0 {
		errs = append(errs, fmt.Errorf("ratelimit: WithIdleTimeout: idle timeout must be >= 0, got %v", o.idle))
	}
	return errors.Join(errs...)
}

// WithMaxKeys caps the number of keys tracked (default DefaultMaxKeys). The
// cap is enforced per shard (MaxKeys divided by the shard count, rounded
// up), so no global counter is contended. A new key that finds its shard
// full first evicts the already-full buckets among a random sample of 16 of that shard; if none
// is, the key shares one overflow bucket, with the same rate and burst as a
// key's, with every other key that found no room. Memory is therefore
// bounded whatever the number of distinct keys, and a flood of new keys gets
// one key's allowance in total rather than one each.
func WithMaxKeys(n int) KeyedOption { return func(o *keyedOptions) { o.maxKeys = n } }

// WithIdleTimeout sets how long a bucket must have been full (refilled to
// its burst and not used since) before the sweeper evicts it (default
// DefaultIdleTimeout). A full bucket is indistinguishable from a new one, so
// eviction never changes an answer; the timeout only avoids churn.
func WithIdleTimeout(d time.Duration) KeyedOption { return func(o *keyedOptions) { o.idle = d } }

// WithSweepInterval sets how often a background goroutine evicts idle
// buckets (default: half the idle timeout). Zero or less starts no
// goroutine; eviction then happens only when a shard is at its cap, or
// when Sweep is called.
func WithSweepInterval(d time.Duration) KeyedOption {
	return func(o *keyedOptions) { o.sweep, o.swept = d, true }
}

// WithShards sets the number of shards, rounded up to a power of two
// (default: 16 × GOMAXPROCS, at least 64). Keys in different shards never
// contend.
func WithShards(n int) KeyedOption { return func(o *keyedOptions) { o.shards = n } }

// Keyed is a set of token buckets by key — a client, a tenant, a method, a
// downstream — all with the same rate and burst. Each bucket is a lock-free
// GCRA word like Limiter's; keys are spread over shards, each a map under a
// read-write lock taken for reading on every admission of a known key.
//
// Memory is bounded: buckets that have been full for the idle timeout are
// evicted by a sweeper goroutine, and the number of keys is capped (see
// WithMaxKeys for what a new key gets at the cap).
//
// Use NewKeyed; the zero value is not usable. Its defaults (see NewKeyed):
// DefaultMaxKeys keys, eviction after DefaultIdleTimeout, a sweeper every
// half idle timeout (at least 1s). Call Close to stop the sweeper. A Keyed
// is safe for concurrent use by multiple goroutines.
type Keyed struct {
	cfg       atomic.Pointer[bucketConfig]
	seed      maphash.Seed
	mask      uint64
	shards    []keyedShard
	perShard  int
	idle      int64 // ns
	epoch     time.Time
	overflow  atomic.Int64 // the shared bucket of keys that found no room
	overflows atomic.Uint64
	evicted   atomic.Uint64

	mu        sync.Mutex // serialises SetLimit and SetBurst
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

type keyedShard struct {
	mu sync.RWMutex
	m  map[string]*atomic.Int64
	_  [40]byte // keep neighbouring shards' locks on separate cache lines
}

// NewKeyed returns a Keyed whose buckets refill at rate r and hold at most b
// tokens, each starting full. Options: WithMaxKeys (default
// DefaultMaxKeys), WithIdleTimeout (default DefaultIdleTimeout),
// WithSweepInterval (default half the idle timeout, at least 1s) and
// WithShards (default 16 × GOMAXPROCS, at least 64).
//
// It returns an error naming every bad value if r is negative or NaN, b < 1,
// or an option is out of range (max keys < 1, negative idle timeout); no
// goroutine is started then.
func NewKeyed(r Limit, b int, opts ...KeyedOption) (*Keyed, error) {
	o := keyedOptions{maxKeys: DefaultMaxKeys, idle: DefaultIdleTimeout}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := errors.Join(checkLimit("NewKeyed", r), checkBurst("NewKeyed", b), o.validate()); err != nil {
		return nil, err
	}
	if !o.swept {
		o.sweep = max(o.idle/2, time.Second)
	}
	n := o.shards
	if n <= 0 {
		n = max(64, 16*runtime.GOMAXPROCS(0))
	}
	n = nextPow2(min(n, 1<<16))
	k := &Keyed{
		seed:     maphash.MakeSeed(),
		mask:     uint64(n - 1),
		shards:   make([]keyedShard, n),
		perShard: (o.maxKeys-1)/n + 1, // rounded up; maxKeys+n-1 overflows for math.MaxInt
		idle:     int64(o.idle),
		epoch:    time.Now(),
	}
	for i := range k.shards {
		k.shards[i].m = make(map[string]*atomic.Int64)
	}
	c := newBucketConfig(r, b, 1)
	k.cfg.Store(&c)
	k.overflow.Store(pack(farPast, c.gen))
	if o.sweep > 0 {
		k.stop, k.done = make(chan struct{}), make(chan struct{})
		go k.sweeper(o.sweep)
	}
	return k, nil
}

func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// Allow reports whether one event for key may happen now, and takes its
// token if so.
func (k *Keyed) Allow(key string) bool {
	return k.allowAt(key, int64(time.Since(k.epoch)), 1)
}

// AllowN reports whether n events for key may happen at instant now, and
// takes their tokens if so. n ≤ 0 and n above the burst behave as in
// Limiter.AllowN.
func (k *Keyed) AllowN(key string, now time.Time, n int) bool {
	return k.allowAt(key, clampNow(int64(now.Sub(k.epoch))), n)
}

func (k *Keyed) allowAt(key string, now int64, n int) bool {
	if n <= 0 {
		return true
	}
	c := k.cfg.Load()
	if c.inf {
		return true
	}
	if n > c.burstEff {
		return false
	}
	sh := &k.shards[maphash.String(k.seed, key)&k.mask]
	sh.mu.RLock()
	if b := sh.m[key]; b != nil {
		// The read lock is held across the CAS so that neither the sweeper
		// nor a reconfiguration can change the bucket under it.
		ok := k.take(b, now, n)
		sh.mu.RUnlock()
		return ok
	}
	sh.mu.RUnlock()
	return k.insert(sh, key, now, n)
}

// take admits n tokens from the bucket word w under the configuration whose
// generation the word carries; while a reconfiguration is between converting
// the word and publishing its configuration, it waits.
func (k *Keyed) take(w *atomic.Int64, now int64, n int) bool {
	for {
		s := w.Load()
		c := k.cfg.Load()
		if s&genMask != c.gen {
			runtime.Gosched()
			continue
		}
		tat, _ := unpack(s)
		newTat, ok := c.take(tat, now, n)
		if !ok {
			return false
		}
		if w.CompareAndSwap(s, pack(newTat, c.gen)) {
			return true
		}
	}
}

// insert handles a key with no bucket: it creates one, or at the cap evicts
// full buckets of the shard first, or falls back to the overflow bucket.
func (k *Keyed) insert(sh *keyedShard, key string, now int64, n int) bool {
	sh.mu.Lock()
	c := k.cfg.Load()             // stable while a shard lock is held
	if b := sh.m[key]; b != nil { // created meanwhile
		ok := k.take(b, now, n)
		sh.mu.Unlock()
		return ok
	}
	if len(sh.m) >= k.perShard {
		k.evictSample(sh, c, now)
	}
	if len(sh.m) >= k.perShard {
		sh.mu.Unlock()
		k.overflows.Add(1)
		return k.take(&k.overflow, now, n)
	}
	b := new(atomic.Int64)
	b.Store(pack(farPast, c.gen))
	ok := k.take(b, now, n)
	// Copy the key so a caller's string built over a larger buffer (a
	// metadata value, say) is not kept alive by the map.
	sh.m[string([]byte(key))] = b
	sh.mu.Unlock()
	return ok
}

// evictLocked deletes the shard's buckets that have been full for at least
// idle ns at now. The shard's write lock must be held.
func (k *Keyed) evictLocked(sh *keyedShard, c *bucketConfig, now, idle int64) int {
	t := c.clock(now)
	var n int
	for key, b := range sh.m {
		tat, _ := unpack(b.Load())
		if c.inf || t-tat >= idle { // not tat+idle <= t: idle may be near MaxInt64
			delete(sh.m, key)
			n++
		}
	}
	k.evicted.Add(uint64(n))
	return n
}

// evictSampleSize bounds the work a new key does at the cap: it looks at this
// many buckets of its shard (Go's map iteration starts at a random place, so
// they are a random sample) and evicts the full ones. A flood of new keys
// therefore costs constant time per key, not a scan of the shard.
const evictSampleSize = 16

func (k *Keyed) evictSample(sh *keyedShard, c *bucketConfig, now int64) {
	t := c.clock(now)
	var seen, n int
	for key, b := range sh.m {
		if seen == evictSampleSize {
			break
		}
		seen++
		if tat, _ := unpack(b.Load()); c.inf || tat <= t {
			delete(sh.m, key)
			n++
		}
	}
	k.evicted.Add(uint64(n))
}

// Sweep evicts, at instant now, every bucket that has been full for the
// idle timeout, and returns how many it evicted. The sweeper goroutine calls
// it periodically; tests and callers without a sweeper may call it directly.
func (k *Keyed) Sweep(now time.Time) int {
	return k.sweepAt(clampNow(int64(now.Sub(k.epoch))))
}

func (k *Keyed) sweepAt(now int64) int {
	var n int
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		n += k.evictLocked(sh, k.cfg.Load(), now, k.idle)
		sh.mu.Unlock()
	}
	return n
}

func (k *Keyed) sweeper(every time.Duration) {
	defer close(k.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			k.sweepAt(int64(time.Since(k.epoch)))
		}
	}
}

// Close stops the sweeper goroutine, if any, and waits for it to exit. The
// Keyed stays usable; idle buckets are then evicted only at the cap or by
// Sweep. Close is idempotent.
func (k *Keyed) Close() error {
	k.closeOnce.Do(func() {
		if k.stop != nil {
			close(k.stop)
			<-k.done
		}
	})
	return nil
}

// Len returns the number of keys with a bucket.
func (k *Keyed) Len() int {
	var n int
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// KeyedStats are counters of a Keyed since it was created, copied out by
// Keyed.Stats: a plain value, with no lock of its own, safe to copy and
// to read from several goroutines. The zero value is the stats of a Keyed
// that has done nothing.
type KeyedStats struct {
	Keys      int    // keys with a bucket now
	Evicted   uint64 // buckets evicted, by the sweeper or at the cap
	Overflows uint64 // admissions decided by the overflow bucket at the cap
}

// Stats returns the Keyed's counters.
func (k *Keyed) Stats() KeyedStats {
	return KeyedStats{Keys: k.Len(), Evicted: k.evicted.Load(), Overflows: k.overflows.Load()}
}

// Tokens returns the tokens available to key at instant now: its bucket's,
// the shared overflow bucket's while the key has none and its shard is at
// its cap (WithMaxKeys), else the burst.
func (k *Keyed) Tokens(key string, now time.Time) float64 {
	c := k.cfg.Load()
	t := clampNow(int64(now.Sub(k.epoch)))
	if tat, ok := k.tatOf(key); ok {
		return c.tokens(tat, t)
	}
	return float64(c.burstEff)
}

// tatOf returns the theoretical arrival time of the bucket that decides
// key (its own, or the overflow bucket while its shard has no room), and
// false for a key a new bucket of its own would decide.
func (k *Keyed) tatOf(key string) (int64, bool) {
	sh := &k.shards[maphash.String(k.seed, key)&k.mask]
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	b := sh.m[key]
	if b == nil && len(sh.m) >= k.perShard {
		b = &k.overflow // no room for the key: the shared bucket decides it (insert)
	}
	if b == nil {
		return 0, false
	}
	tat, _ := unpack(b.Load())
	return tat, true
}

// RetryAfter returns how long after instant now n tokens will be available
// to key, as Limiter.RetryAfter does: from the bucket that decides it, as
// Tokens reads it.
func (k *Keyed) RetryAfter(key string, now time.Time, n int) time.Duration {
	c := k.cfg.Load()
	t := clampNow(int64(now.Sub(k.epoch)))
	if c.inf || n <= 0 {
		return 0
	}
	if n > c.burstEff {
		return time.Duration(1<<63 - 1)
	}
	tat, ok := k.tatOf(key)
	if !ok {
		tat = farPast
	}
	ct := c.clock(t)
	wait := max(tat, ct) + int64(n)*c.interval - ct - c.tau
	switch {
	case wait <= 0:
		return 0
	case c.frozen:
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(wait)
}

// Limit returns the rate of every bucket.
func (k *Keyed) Limit() Limit { return k.cfg.Load().limit }

// Burst returns the burst of every bucket.
func (k *Keyed) Burst() int { return k.cfg.Load().burst }

// SetLimitAt sets the rate of every bucket at instant now, keeping the
// tokens each has earned. It holds every shard's lock while it converts the
// buckets, so it costs time proportional to the number of keys: it is meant
// for configuration changes, not for per-request adjustment. If r is
// negative or NaN it returns an error and changes nothing.
func (k *Keyed) SetLimitAt(now time.Time, r Limit) error {
	if err := checkLimit("SetLimit", r); err != nil {
		return err
	}
	k.reconfigure(now, func(c *bucketConfig) { c.limit = r })
	return nil
}

// SetBurstAt sets the burst of every bucket at instant now, keeping the
// tokens each has earned up to the new burst; see SetLimitAt for its cost.
// If b < 1 it returns an error and changes nothing.
func (k *Keyed) SetBurstAt(now time.Time, b int) error {
	if err := checkBurst("SetBurst", b); err != nil {
		return err
	}
	k.reconfigure(now, func(c *bucketConfig) { c.burst = b })
	return nil
}

func (k *Keyed) reconfigure(at time.Time, edit func(*bucketConfig)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := clampNow(int64(at.Sub(k.epoch)))
	old := k.cfg.Load()
	nc, changed := old.next(edit)
	if !changed {
		return
	}
	for i := range k.shards {
		k.shards[i].mu.Lock()
	}
	for i := range k.shards {
		for _, b := range k.shards[i].m {
			tat, _ := unpack(b.Load())
			b.Store(pack(convert(old, nc, tat, now), nc.gen))
		}
	}
	// The overflow bucket is used outside the shard locks: convert it by CAS.
	for {
		s := k.overflow.Load()
		tat, _ := unpack(s)
		if k.overflow.CompareAndSwap(s, pack(convert(old, nc, tat, now), nc.gen)) {
			break
		}
	}
	k.cfg.Store(nc)
	for i := range k.shards {
		k.shards[i].mu.Unlock()
	}
}

// RefundAt gives back n tokens taken earlier for key, for an event that did
// not happen, at instant now; see Limiter.RefundAt. A key without a bucket
// (evicted, or decided by the overflow bucket) is left alone: its bucket is
// full, or shared.
func (k *Keyed) RefundAt(key string, now time.Time, n int) {
	if n <= 0 {
		return
	}
	sh := &k.shards[maphash.String(k.seed, key)&k.mask]
	sh.mu.RLock()
	if b := sh.m[key]; b != nil {
		refundWord(b, k.cfg.Load, clampNow(int64(now.Sub(k.epoch))), n)
	}
	sh.mu.RUnlock()
}
