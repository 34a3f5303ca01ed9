package redislimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/ratelimit"
)

// Result is a Limiter's answer for one call, a plain value returned to
// the goroutine that asked; it has no lock of its own. The zero Result
// refuses, decided by Redis, with no retry delay known.
type Result struct {
	// Allowed is true when the call may go ahead; its tokens are taken.
	Allowed bool
	// RetryAfter is, for a refused call, how long until the tokens asked
	// for are there (admission.Never when they never can be: more than the
	// shared burst); 0 for an allowed call. The local fallback, whose
	// bucket holds this replica's share of the burst (or WithLocalBurst),
	// refuses more than its bucket holds, though within the shared burst,
	// with the probe interval (WithProbe): those calls wait for Redis.
	RetryAfter time.Duration
	// Remaining is how many whole tokens the bucket holds after the
	// decision.
	Remaining int
	// Local is true when the local fallback decided, because Redis was
	// slow, down, or behind an open breaker.
	Local bool
}

// Stats are a Limiter's counters since New, a plain value that
// Limiter.Stats copies out: safe to copy and to read concurrently, not to
// write from several goroutines at once. The zero value counts nothing
// (and its Breaker is breaker.StateClosed).
type Stats struct {
	Allowed       uint64        // calls the shared limit in Redis allowed (not counting those a lease admitted)
	LeaseAllowed  uint64        // calls a lease admitted: tokens leased from Redis, less those dropped and those in hand
	Refused       uint64        // calls the shared limit in Redis (or a dry lease) refused
	LocalAllowed  uint64        // calls the local fallback allowed
	LocalRefused  uint64        // calls the local fallback refused
	Errors        uint64        // Redis round trips that failed or timed out
	Reloads       uint64        // scripts given to Redis again after NOSCRIPT
	Replicas      int           // replicas sharing the limit, as last learned or configured
	Share         float64       // this replica's share of the shared rate in the fallback: of the fleet's recent calls, as last learned, or 1 ÷ Replicas
	Breaker       breaker.State // the breaker on Redis
	Rate          float64       // the shared rate, tokens per second
	LocalRate     float64       // the fallback's rate: Rate × Share
	Burst         int           // the shared burst
	Heartbeats    uint64        // heartbeats that Redis answered
	HeartbeatFail uint64        // heartbeats that failed
	Refills       uint64        // round trips that refilled a lease (Redis answered, with what tokens it had; a failed one counts in Errors)
	Dropped       uint64        // leased tokens dropped unspent at their time to live
	Leases        int           // keys leased now
}

// Limiter is one token bucket per key shared by every replica of a
// service, kept in Redis: GCRA in one Lua script with Redis's clock (see
// the package documentation). When Redis is slow or down it decides
// locally, at its share of the shared rate (its share of the fleet's
// recent calls, learned from the heartbeats), behind a breaker, and goes
// back to Redis by itself.
//
// Create one with New, which takes a rueidis client (to a single Redis or
// a cluster), the limit's name, its rate and its burst; the zero value is
// not usable. A Limiter owns its goroutines — heartbeats and probes, the
// fallback's sweeper, and with leases their refills and sweeper: stop them
// with Close. It is safe for concurrent use.
type Limiter struct {
	client   rueidis.Client
	o        options
	name     string
	rate     float64
	burst    int
	base     string  // "<prefix>:<name>:{"
	argT     string  // µs per token
	argTau   string  // burst × µs per token
	interval int64   // ns per token
	ls       *leases // nil unless WithLeases
	dl       *deadlines

	gcra   script
	beat   script
	hbKey  string
	hbLoad string // the hash of the replicas' recent rates
	id     string

	br    *breaker.Breaker
	local *ratelimit.Keyed
	alive atomic.Int64
	share atomic.Uint64 // float64 bits: this replica's share of the rate in the fallback
	setMu sync.Mutex    // serialises changes of the fallback's rate

	// Owned by the limiter's goroutine: the calls decided at the last
	// heartbeat, when, and this replica's smoothed rate of calls.
	beatCalls uint64
	beatAt    time.Time
	beatRate  float64

	allowed, refused, localAllowed, localRefused atomic.Uint64
	errors, reloads, hbOK, hbFail                atomic.Uint64

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closed    atomic.Bool // no goroutine refills leases any more
}

// New returns a Limiter of the limit name, shared through client by every
// replica that uses the same name (and prefix): each key's bucket refills
// at rate tokens per second across the fleet and holds at most burst
// tokens, starting full. It starts the limiter's goroutines, whose first
// heartbeat goes at once; New itself sends nothing to Redis.
//
// It returns an error naming every bad value: a name that is empty or
// holds '{' or '}', a rate outside (0, 10⁶] (the script counts
// microseconds), a burst below 1, or a bad option. It panics if client is
// nil.
func New(client rueidis.Client, name string, rate float64, burst int, opts ...Option) (*Limiter, error) {
	if client == nil {
		panic("redislimit: New: nil client")
	}
	o := defaults()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	wait := o.waitOpen
	if wait <= 0 {
		wait = DefaultWaitInOpen // reported by o.validate; keep the breaker's errors the user's own
	}
	br, brErr := breaker.New(append([]breaker.Option{
		breaker.WithCountWindow(10),
		breaker.WithMinimumCalls(5),
		breaker.WithFailureRate(50),
		breaker.WithWaitInOpen(wait),
		breaker.WithHalfOpenCalls(2),
	}, o.breaker...)...)
	if brErr != nil {
		brErr = fmt.Errorf("redislimit: WithBreaker: %w", brErr)
	}
	if err := errors.Join(checkName(name), checkRate(rate), checkBurst(burst), o.validate(), brErr); err != nil {
		return nil, err
	}
	if o.replicaID == "" {
		o.replicaID = defaultReplicaID()
	}
	t := math.Ceil(1e6 / rate) // µs per token, rounded up: never faster than rate
	l := &Limiter{
		client: client,
		o:      o,
		name:   name,
		rate:   rate,
		burst:  burst,
		base:   o.prefix + ":" + name + ":{",
		argT:   strconv.FormatFloat(t, 'f', 0, 64),
		argTau: strconv.FormatFloat(t*float64(burst), 'f', 0, 64),
		gcra:   newScript(gcraScript),
		beat:   newScript(heartbeatScript),
		id:     o.replicaID,
		br:     br,
		dl:     newDeadlines(o.timeout),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	l.interval = int64(t) * int64(time.Microsecond)
	l.hbKey = l.base + "replicas}"
	l.hbLoad = l.base + "replicas}:rates"
	n := max(o.replicas, 1)
	l.alive.Store(int64(n))
	l.share.Store(math.Float64bits(1 / float64(n)))
	// Cannot fail: rate > 0 and the burst is at least 1.
	l.local, _ = ratelimit.NewKeyed(ratelimit.Limit(rate/float64(n)), l.localBurst(1/float64(n)))
	if o.leased {
		l.ls = newLeases(o.lease)
	}
	go l.run()
	if o.leased {
		l.ls.wg.Add(refillWorkers + 1)
		for range refillWorkers {
			go l.refiller()
		}
		go l.sweeper()
	}
	return l, nil
}

func defaultReplicaID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// localBurst is the burst of the fallback's buckets at share of the
// shared rate.
func (l *Limiter) localBurst(share float64) int {
	if l.o.localBurst > 0 {
		return l.o.localBurst
	}
	return max(1, int(float64(l.burst)*share))
}

// Key returns the Redis key of key's bucket: "<prefix>:<name>:{<key>}",
// hash-tagged so that a cluster keeps it, and the script on it, on one
// slot. The key is written as it is when it is at most 256 bytes without
// '{', '}' or '%' (a tenant, an address, a method); otherwise '%', '{' and
// '}' are written %25, %7B and %7D, and a longer key as "%H" and the hex
// of its SHA-256, so that the tag ends where the key does (a client
// cannot pick its slot) and distinct keys keep distinct buckets. The key
// "replicas" is written "%replicas": "{replicas}" is the heartbeats'.
func (l *Limiter) Key(key string) string { return l.redisKey(tag(key)) }

// redisKey returns the Redis key of the bucket called name, a tag.
func (l *Limiter) redisKey(name string) string { return l.base + name + "}" }

// Allow reports whether one call of key may go ahead now; it is AllowN(ctx,
// key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) Result { return l.AllowN(ctx, key, 1) }

// AllowN reports whether n calls of key may go ahead now, and takes their
// tokens if so. With n <= 0 it allows and takes nothing; with n above the
// burst it refuses with RetryAfter admission.Never, without asking Redis,
// and only then: n within the burst that the local fallback's smaller
// bucket can never hold is refused by the fallback with the probe interval
// (WithProbe) as RetryAfter, since the shared limit can allow them once
// Redis answers again.
//
// It asks Redis in one round trip, bounded by the timeout (WithTimeout)
// alone: calls that start within the same tenth of the timeout share one
// deadline, so that no call pays for a timer of its own, and a round trip
// does not end early when ctx does. Past the timeout, on an error, while
// the breaker on Redis is not closed, or when ctx is already done (its
// caller gave up: no round trip is worth it), the local fallback decides
// (Result.Local): a bucket per key at this replica's share of the shared
// rate (see Stats.Share). It never
// returns an error: Redis's failures show only in Stats. With leases
// (WithLeases) a call of one token is taken from key's lease, which
// allocates nothing and waits on nothing while the lease holds tokens
// (whether ctx is done or not); when the lease is dry the call is decided
// as above, its round trip a refill of the lease. Other n are asked of
// Redis directly.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) Result {
	return l.allowName(ctx, tag(key), n)
}

// allowName is AllowN for the bucket called key, a tag.
func (l *Limiter) allowName(ctx context.Context, key string, n int) Result {
	if n <= 0 {
		return Result{Allowed: true, Remaining: l.burst}
	}
	if n > l.burst {
		return Result{RetryAfter: admission.Never}
	}
	if l.ls != nil && n == 1 {
		id := leaseID{key: key, scope: ByKey}
		if lz := l.ls.get(id); lz != nil {
			r, _ := l.leased(ctx, id, lz)
			return r
		}
	}
	return l.direct(ctx, key, n)
}

// direct decides n calls of key (a tag) with one round trip to Redis.
func (l *Limiter) direct(ctx context.Context, key string, n int) Result {
	now := l.o.now()
	if ctx.Err() != nil || l.br.StateAt(now) != breaker.StateClosed {
		return l.fallback(key, now, n)
	}
	p, err := l.br.AllowAt(now)
	if err != nil {
		return l.fallback(key, now, n)
	}
	start := time.Now()
	r, err := l.shared(key, n)
	p.Done(err, time.Since(start))
	if err != nil {
		l.errors.Add(1)
		return l.fallback(key, now, n)
	}
	if r.Allowed {
		l.allowed.Add(1)
	} else {
		l.refused.Add(1)
	}
	return r
}

// shared runs the GCRA script on key's bucket.
func (l *Limiter) shared(key string, n int) (Result, error) {
	arg := "1"
	if n != 1 {
		arg = strconv.Itoa(n)
	}
	v, err := l.run3(l.dl.get(), key, arg, "0")
	if err != nil {
		return Result{}, err
	}
	r := Result{Allowed: v[0] > 0, Remaining: int(v[2])}
	if !r.Allowed {
		r.RetryAfter = time.Duration(v[1]) * time.Microsecond
	}
	return r, nil
}

// run3 runs the GCRA script on the bucket of key (the name of the bucket,
// a tag, not its Redis key) asking for n tokens, partial or not, and
// returns its three integers.
func (l *Limiter) run3(ctx context.Context, key, n, partial string) ([]int64, error) {
	var res rueidis.RedisResult
	var reloaded bool
	keys := [1]string{l.redisKey(key)}
	if l.o.redisNow != nil {
		res, reloaded = l.gcra.exec(ctx, l.client, keys[:], l.argT, l.argTau, n, partial, strconv.FormatInt(l.o.redisNow(), 10))
	} else {
		res, reloaded = l.gcra.exec(ctx, l.client, keys[:], l.argT, l.argTau, n, partial)
	}
	if reloaded {
		l.reloads.Add(1)
	}
	v, err := res.AsIntSlice()
	if err != nil {
		return nil, err
	}
	if len(v) != 3 {
		return nil, fmt.Errorf("redislimit: script answered %v, want 3 integers", v)
	}
	return v, nil
}

// fallback decides locally at this replica's share of the shared rate.
func (l *Limiter) fallback(key string, now time.Time, n int) Result {
	if l.local.AllowN(key, now, n) {
		l.localAllowed.Add(1)
		return Result{Allowed: true, Remaining: int(l.local.Tokens(key, now)), Local: true}
	}
	l.localRefused.Add(1)
	return Result{RetryAfter: l.localRetry(key, now, n), Local: true}
}

// localRetry is the retry delay of the fallback's refusal of n calls of
// key (n within the shared burst): when its bucket will hold n tokens, or,
// when it never will (n above its burst: the shared burst × this
// replica's share, or WithLocalBurst), the probe interval: the shared
// bucket can hold them, so the calls wait for Redis, which the limiter
// probes that often while it is sick, not for ever.
func (l *Limiter) localRetry(key string, now time.Time, n int) time.Duration {
	if d := l.local.RetryAfter(key, now, n); d != admission.Never {
		return d
	}
	return l.o.probe
}

// Replicas returns how many replicas share the limit: as configured
// (WithReplicas), or as the last heartbeat counted them.
func (l *Limiter) Replicas() int { return int(l.alive.Load()) }

// setAlive records that n replicas are alive and that this replica's
// share of the shared rate in the fallback is share, and rescales the
// fallback when either changed (the share by more than shareStep).
func (l *Limiter) setAlive(n int, share float64) {
	n = max(n, 1)
	l.setMu.Lock()
	defer l.setMu.Unlock()
	old := math.Float64frombits(l.share.Load())
	if int(l.alive.Load()) == n && math.Abs(share-old) <= shareStep*old {
		return
	}
	l.alive.Store(int64(n))
	l.share.Store(math.Float64bits(share))
	now := l.o.now()
	// Cannot fail: the rate is positive and the burst at least 1.
	_ = l.local.SetLimitAt(now, ratelimit.Limit(l.rate*share))
	_ = l.local.SetBurstAt(now, l.localBurst(share))
}

// The fallback's share: a replica's share of the fleet's recent calls,
// at least minShare ÷ the replicas alive (a replica that was idle before
// Redis went down may get calls while it is), and 1 ÷ the replicas alive
// while the fleet offers fewer than quietRate calls per second. A change
// of share by less than shareStep of it does not rescale the fallback.
const (
	minShare  = 0.25
	quietRate = 1.0
	shareStep = 0.02
)

// fleetShare returns the fallback's share of a replica offering mine of
// the fleet's total calls per second, with n replicas alive.
func fleetShare(mine, total float64, n int) float64 {
	n = max(n, 1)
	even := 1 / float64(n)
	if !(total >= quietRate) || mine < 0 {
		return even
	}
	return min(1, max(mine/total, minShare*even))
}

// decided returns the calls this limiter has decided since New, however
// they were decided.
func (l *Limiter) decided() uint64 {
	n := l.allowed.Load() + l.refused.Load() + l.localAllowed.Load() + l.localRefused.Load()
	if l.ls != nil {
		n += l.ls.spent()
	}
	return n
}

// rateNow updates and returns this replica's smoothed rate of calls, in
// calls per second, from the calls decided since the last heartbeat.
func (l *Limiter) rateNow() float64 {
	now, calls := l.o.now(), l.decided()
	if !l.beatAt.IsZero() {
		if dt := now.Sub(l.beatAt).Seconds(); dt > 0 {
			r := float64(calls-l.beatCalls) / dt
			if l.beatRate == 0 {
				l.beatRate = r
			} else {
				l.beatRate = 0.5*l.beatRate + 0.5*r
			}
		}
	}
	l.beatCalls, l.beatAt = calls, now
	return l.beatRate
}

// Stats returns the limiter's counters.
func (l *Limiter) Stats() Stats {
	n := l.Replicas()
	share := math.Float64frombits(l.share.Load())
	var refills, dropped, leased uint64
	var leases int
	if l.ls != nil {
		refills, dropped, leases = l.ls.refilled.Load(), l.ls.dropped.Load(), int(l.ls.count.Load())
		leased = l.ls.spent()
	}
	return Stats{
		LeaseAllowed:  leased,
		Refills:       refills,
		Dropped:       dropped,
		Leases:        leases,
		Allowed:       l.allowed.Load(),
		Refused:       l.refused.Load(),
		LocalAllowed:  l.localAllowed.Load(),
		LocalRefused:  l.localRefused.Load(),
		Errors:        l.errors.Load(),
		Reloads:       l.reloads.Load(),
		Replicas:      n,
		Share:         share,
		Breaker:       l.br.StateAt(l.o.now()),
		Rate:          l.rate,
		LocalRate:     l.rate * share,
		Burst:         l.burst,
		Heartbeats:    l.hbOK.Load(),
		HeartbeatFail: l.hbFail.Load(),
	}
}

// run is the limiter's goroutine: it renews the heartbeat every
// WithHeartbeat interval and, while the breaker on Redis is open or
// half-open, probes Redis every WithProbe interval, so that no caller ever
// waits on a probe.
func (l *Limiter) run() {
	defer close(l.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			l.leave()
			return
		case <-t.C:
		}
		t.Reset(l.tick())
	}
}

// tick sends one heartbeat through the breaker, which makes it the probe
// while the breaker is half-open (after a PING has answered), and returns
// when to tick again.
func (l *Limiter) tick() time.Duration {
	now := l.o.now()
	if l.br.StateAt(now) != breaker.StateClosed && !l.ping() {
		// Spend no probe on a Redis that does not answer: the breaker
		// stays open (or half-open) until one would succeed.
		return l.o.probe
	}
	p, err := l.br.AllowAt(now)
	if err != nil {
		return l.o.probe
	}
	// In the thousandths of a call per second Redis keeps, so that a
	// replica alone has a share of exactly 1.
	mine := math.Round(min(l.rateNow(), maxRate)*1000) / 1000
	start := time.Now()
	n, total, err := l.heartbeat(false, mine)
	p.Done(err, time.Since(start))
	switch {
	case err != nil:
		l.hbFail.Add(1)
	case l.o.replicas == 0:
		l.setAlive(n, fleetShare(mine, total, n))
		fallthrough
	default:
		l.hbOK.Add(1)
	}
	if l.br.StateAt(l.o.now()) != breaker.StateClosed {
		return l.o.probe
	}
	return l.o.heartbeat
}

// ping reports whether Redis answers PING within the timeout; it also
// lets the client reconnect, so that a probe after it measures Redis, not
// the reconnection.
func (l *Limiter) ping() bool {
	ctx, cancel := context.WithTimeout(context.Background(), l.o.timeout)
	defer cancel()
	return l.client.Do(ctx, l.client.B().Ping().Build()).Error() == nil
}

// heartbeat renews (or, leaving, removes) this replica's heartbeat and its
// rate of calls, mine per second, and returns how many replicas are alive
// and the sum of their rates; NaN for the sum when some of them have no
// rate (a replica of an older version), so that the share is even.
func (l *Limiter) heartbeat(leaving bool, mine float64) (n int, total float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), l.o.timeout)
	defer cancel()
	flag := "0"
	if leaving {
		flag = "1"
	}
	milli := strconv.FormatInt(int64(math.Round(min(mine, maxRate)*1000)), 10)
	ttl := strconv.FormatInt(l.o.ttl.Milliseconds(), 10)
	var v []int64
	// A heartbeat is idempotent: after Redis restarted, a connection the
	// client still held to the old process answers EOF once; send it again
	// on a fresh one rather than fail a probe for that.
	for try := 0; ; try++ {
		res, reloaded := l.beat.exec(ctx, l.client, []string{l.hbKey, l.hbLoad}, l.id, ttl, flag, milli)
		if reloaded {
			l.reloads.Add(1)
		}
		if v, err = res.AsIntSlice(); err == nil {
			break
		}
		if _, isRedis := rueidis.IsRedisErr(err); isRedis || try == 1 || ctx.Err() != nil {
			return 0, 0, err
		}
	}
	if len(v) != 3 {
		return 0, 0, fmt.Errorf("redislimit: heartbeat script answered %v, want 3 integers", v)
	}
	if v[2] < v[0] {
		return int(v[0]), math.NaN(), nil
	}
	return int(v[0]), float64(v[1]) / 1000, nil
}

// leave removes this replica's heartbeat, so the others' fallback counts
// it gone at once; best effort, skipped while the breaker is open.
func (l *Limiter) leave() {
	if l.br.StateAt(l.o.now()) == breaker.StateClosed {
		_, _, _ = l.heartbeat(true, 0)
	}
}

// Close stops the limiter's goroutines: the heartbeats, after removing
// this replica's from Redis (one round trip, bounded by the timeout), the
// fallback's sweeper, and the leases' refills and sweeper. It does not close the client, which is the
// caller's. Calls after Close are still answered: from the tokens a lease
// still holds, then in direct mode (or by the local fallback, which no
// probe ends any more). Close twice does nothing and returns nil.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.stop)
		<-l.done
		if l.ls != nil {
			l.ls.wg.Wait()
		}
		l.dl.stop()
		_ = l.local.Close()
	})
	return nil
}
