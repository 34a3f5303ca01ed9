package redislimit

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Script's source, run by hand with the keys and arguments its doc gives,
// answers as the doc says: {taken, µs until one more token, tokens left},
// all or nothing or as many as there are, and the key expires when the
// bucket would be full again.
func TestScriptAsDocumented(t *testing.T) {
	s, _ := single(t)
	const key = "tool:{k}"
	const T, tau = "10000000", "30000000" // 1 token per 10 s, burst 3
	now := strconv.FormatInt(1_700_000_000_000_000, 10)
	for _, tt := range []struct {
		n, lease string
		want     string // the reply's elements
	}{
		{"1", "0", "1 0 2"},        // one of three: the next is there already
		{"3", "0", "0 10000000 2"}, // three of two: none, the third in 10 s
		{"3", "1", "2 10000000 0"}, // as many as there are: two
		{"1", "0", "0 10000000 0"}, // empty
		{"1", "1", "0 10000000 0"}, // empty, as many as there are: none
	} {
		got := strings.Fields(s.Do("EVAL", Script(), "1", key, T, tau, tt.n, tt.lease, now))
		if strings.Join(got, " ") != tt.want {
			t.Errorf("n %s, lease %s: reply %q, want %q", tt.n, tt.lease, got, tt.want)
		}
	}
	// Full again 30 s after now: the key expires then.
	if ms, err := strconv.Atoi(s.Do("PTTL", key)); err != nil || ms <= 29000 || ms > 30000 {
		t.Errorf("PTTL %s = %d ms (%v), want about 30000", key, ms, err)
	}
}

// Script is the script a direct-mode Limiter runs: loaded ahead of time
// (SCRIPT LOAD), the limiter runs it by its SHA1 without sending it, and
// a tool running it on Limiter.Key with the limiter's T and tau shares
// the limiter's bucket.
func TestScriptIsTheLimiters(t *testing.T) {
	s, c := single(t)
	const now = 1_700_000_000_000_000
	s.Do("SCRIPT", "FLUSH")
	sha := s.Do("SCRIPT", "LOAD", Script())
	l := mustNew(t, c, "tool", 0.1, 3, withRedisNow(func() int64 { return now }), WithHeartbeat(time.Minute, 2*time.Minute))
	settle(t, s, l)
	ctx := context.Background()
	for i := range 2 {
		if r := l.Allow(ctx, "k"); !r.Allowed || r.Local {
			t.Fatalf("Allow #%d = %+v, want allowed by Redis", i, r)
		}
	}
	if e, es := s.CommandCalls("eval"), s.CommandCalls("evalsha"); e != 0 || es != 2 {
		t.Errorf("Redis ran EVAL %d and EVALSHA %d times, want 0 and 2: the limiter's script is not Script()", e, es)
	}
	reply := strings.Fields(s.Do("EVALSHA", sha, "1", l.Key("k"), "10000000", "30000000", "1", "0", strconv.Itoa(now)))
	if got := strings.Join(reply, " "); got != "1 10000000 0" {
		t.Errorf("the tool's take of the limiter's last token: reply %q, want 1 10000000 0", reply)
	}
	if r := l.Allow(ctx, "k"); r.Allowed || r.Local {
		t.Errorf("Allow after the tool took the last token = %+v, want refused by Redis", r)
	}
}
