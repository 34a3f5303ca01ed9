package redislimit

import (
	"context"
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/rueidis"
)

// gcraScript is the direct mode's script: see Script, whose doc gives
// its keys, arguments and reply.
const gcraScript = `
local T = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local now
if ARGV[5] then
  now = tonumber(ARGV[5])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat or tat < now then tat = now end
if tat - now > tau then
  tat = now + tau
  redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.ceil(tau / 1000))
end
if ARGV[4] == '1' then
  n = math.max(0, math.min(n, math.floor((tau - (tat - now)) / T)))
end
local new = tat + n * T
if new - now > tau then
  return {0, new - now - tau, math.floor((tau - (tat - now)) / T)}
end
if n > 0 then
  redis.call('SET', KEYS[1], string.format('%d', new), 'PX', math.ceil((new - now) / 1000))
end
return {n, math.max(0, new + T - tau - now), math.floor((tau - (new - now)) / T)}
`

// heartbeatScript renews one replica's heartbeat and its recent rate of
// calls, counts the replicas alive, in Redis's clock, and sums their
// rates: a sorted set of replica ids scored by the millisecond their
// heartbeat expires, and a hash of their rates, both in the same slot.
//
//	KEYS[1]  the set
//	KEYS[2]  the hash of rates
//	ARGV[1]  this replica's id
//	ARGV[2]  the heartbeat's time to live, ms
//	ARGV[3]  "0" to renew, "1" to leave
//	ARGV[4]  this replica's recent rate of calls, in thousandths of a call
//	         per second (an integer)
//
// It returns the number of replicas alive, the sum of their rates, in
// thousandths of a call per second, and how many of them have a rate (a
// replica of an older version sends none).
const heartbeatScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
end
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 1, #gone do
  redis.call('HDEL', KEYS[2], gone[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
local total, counted = 0, 0
if #live > 0 then
  local rates = redis.call('HMGET', KEYS[2], unpack(live))
  for i = 1, #rates do
    local r = tonumber(rates[i])
    if r then
      total = total + r
      counted = counted + 1
    end
  end
end
return {#live, total, counted}
`

// script is a Lua script run by EVALSHA, loaded again (EVAL, which caches
// it) when Redis answers NOSCRIPT: after a restart, a failover or SCRIPT
// FLUSH. Its scripts touch one key, so a cluster client sends them to
// that key's node.
type script struct {
	src, sha string
}

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// exec runs the script on keys (of one slot) with args; reloaded reports
// whether Redis had to be given the script again.
func (s *script) exec(ctx context.Context, c rueidis.Client, keys []string, args ...string) (r rueidis.RedisResult, reloaded bool) {
	n := int64(len(keys))
	r = c.Do(ctx, c.B().Evalsha().Sha1(s.sha).Numkeys(n).Key(keys...).Arg(args...).Build())
	if e, ok := rueidis.IsRedisErr(r.Error()); ok && e.IsNoScript() {
		return c.Do(ctx, c.B().Eval().Script(s.src).Numkeys(n).Key(keys...).Arg(args...).Build()), true
	}
	return r, false
}

// Script returns the Lua source of the direct mode's script, for a tool
// that loads it ahead of time (SCRIPT LOAD) or compares it with another.
// It is the generic cell rate algorithm on one key, in Redis's clock. The
// key holds the theoretical arrival time (TAT) in microseconds of Redis's
// TIME; the bucket is full when it is absent or in the past.
//
//	KEYS[1]  the bucket (Limiter.Key)
//	ARGV[1]  T, the emission interval: µs per token (10⁶ ÷ rate, rounded up)
//	ARGV[2]  tau, the burst tolerance: burst × T
//	ARGV[3]  n, the tokens asked for (1 ≤ n ≤ burst)
//	ARGV[4]  "1" to take as many as there are, up to n (a lease); "0" for
//	         all or nothing
//	ARGV[5]  optional: the instant in µs, for tests; TIME otherwise
//
// It returns {tokens taken, µs until one more token is there, tokens
// left}; all or nothing, a refusal takes 0 and says when n will be there.
// A TAT more than tau ahead, which no take leaves (Redis's clock stepped
// back, or the burst shrank), is an empty bucket: it is set to now + tau,
// so that no call waits longer than an empty bucket's refill, however far
// the clock stepped. Taking k tokens moves the TAT k × T later; the key
// expires when the bucket would be full again, so idle keys cost Redis
// nothing. Redis 5 and later replicate a script's effects, so reading
// TIME before a write is allowed.
func Script() string { return gcraScript }
