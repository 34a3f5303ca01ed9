package redislimit

import (
	"context"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// TestFallbackBatchAboveLocalBurst: while the local fallback decides (the
// caller's context done, or the breaker on Redis open), AllowN of a batch
// above the fallback bucket's burst but within the shared burst is refused
// with a finite retry delay, the probe interval (WithProbe): the shared
// limit can allow it once Redis answers again, so it is not refused for
// ever because Redis is down. Only a batch above the shared burst is
// refused with admission.Never. Before, the fallback answered such a batch
// with admission.Never (the fallback bucket's own answer for more than its
// burst), which a caller reads as "give up".
func TestFallbackBatchAboveLocalBurst(t *testing.T) {
	_, c := single(t)
	const rate, burst = 100, 40 // 4 replicas: the fallback's buckets hold 10
	const probe = 40 * time.Millisecond
	now := time.Now()
	l := mustNew(t, c, "batch", rate, burst, quiet, WithReplicas(4), WithProbe(time.Second, probe),
		withNow(func() time.Time { return now }))
	const localBurst = burst / 4

	done, cancel := context.WithCancel(context.Background())
	cancel()
	if r := l.AllowN(done, "a", 2*localBurst); r.Allowed || !r.Local || r.RetryAfter != probe {
		t.Errorf("context done: AllowN(%d) with a fallback burst of %d and a shared burst of %d = %+v, want refused locally, retry %v",
			2*localBurst, localBurst, burst, r, probe)
	}

	ctx := context.Background()
	l.br.ForceOpen() // Redis down: every call is decided locally
	for _, tt := range []struct {
		key   string
		n     int
		allow bool
		retry time.Duration
		local bool
	}{
		{"b", localBurst, true, 0, true},                // the fallback's whole bucket
		{"c", localBurst + 1, false, probe, true},       // more than it holds: wait for Redis
		{"c", burst, false, probe, true},                // the shared burst: wait for Redis
		{"c", burst + 1, false, admission.Never, false}, // more than the shared burst: never
		{"c", localBurst, true, 0, true},                // the refusals took nothing
	} {
		r := l.AllowN(ctx, tt.key, tt.n)
		if r.Allowed != tt.allow || r.RetryAfter != tt.retry || r.Local != tt.local {
			t.Errorf("breaker open: AllowN(%q, %d) with a fallback burst of %d and a shared burst of %d = %+v; want allowed %v, retry %v, local %v",
				tt.key, tt.n, localBurst, burst, r, tt.allow, tt.retry, tt.local)
		}
	}
	if st := l.Stats(); st.LocalAllowed != 2 || st.LocalRefused != 3 {
		t.Errorf("Stats = %+v, want 2 calls allowed and 3 refused locally", st)
	}
}
