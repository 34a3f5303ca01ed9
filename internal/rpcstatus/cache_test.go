package rpcstatus

import (
	"sync"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// countingBuild returns a build function that counts its calls and
// returns a fresh value each time.
func countingBuild(n *int) func(decide.Refusal) *string {
	return func(rf decide.Refusal) *string {
		*n++
		s := rf.Guard + ": " + rf.Message
		return &s
	}
}

func TestCacheSharesRefusalsAlike(t *testing.T) {
	var c Cache[*string]
	var builds int
	build := countingBuild(&builds)
	d := admission.RefuseFor(admission.CauseRunQueueFull, admission.EvidenceStanding, "too many calls waiting", 5*time.Millisecond)
	d.Value, d.Threshold = 12.31, 10
	a := c.Get(decide.NewRefusal(decide.ResourceExhausted, "run", d, ""), build)
	d.Value = 12.34 // the same to two significant digits, as the details show it
	b := c.Get(decide.NewRefusal(decide.ResourceExhausted, "run", d, ""), build)
	if a != b || builds != 1 {
		t.Errorf("two refusals alike: values %p and %p, %d builds; want one value, built once", a, b, builds)
	}
	d.Value = 13
	if v := c.Get(decide.NewRefusal(decide.ResourceExhausted, "run", d, ""), build); v == a || builds != 2 {
		t.Errorf("a refusal of another figure: value %p (first %p), %d builds; want a new value, built twice in all", v, a, builds)
	}
	if v := c.Get(decide.NewRefusal(decide.ResourceExhausted, "run", d, "").Sustained(), build); builds != 3 || *v != "run: too many calls waiting" {
		t.Errorf("the same refusal, sustained: %d builds, want 3 (it tells its client not to retry)", builds)
	}
}

func TestCacheBuildsPerKeyRefusalsEveryTime(t *testing.T) {
	var c Cache[*string]
	var builds int
	d := admission.RefuseFor(admission.CausePerKeyLimited, admission.EvidenceLimit, "rate limit exceeded", time.Second)
	d.PerKey = true
	for _, key := range []string{"acme", "acme", "globex"} {
		c.Get(decide.NewRefusal(decide.ResourceExhausted, "client", d, key), countingBuild(&builds))
	}
	if builds != 3 {
		t.Errorf("three per-key refusals built %d times, want 3 (the key is the caller's)", builds)
	}
}

// Refusals of many kinds from many goroutines each get the value built
// for their own refusal (run with -race).
func TestCacheConcurrent(t *testing.T) {
	var c Cache[string]
	build := func(rf decide.Refusal) string { return rf.Guard }
	guards := []string{"run", "cpu", "memory", "deadline", "bucket", "breaker", "queue", "throttle", "a", "bb", "ccc", "dddd", "eeeee", "ffffff", "ggggggg", "hhhhhhhh", "iiiiiiiii"}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				g := guards[(i+w)%len(guards)]
				if v := c.Get(decide.NewRefusal(decide.ResourceExhausted, g, admission.Decision{Refused: true}, ""), build); v != g {
					t.Errorf("Get(refusal by %q) = %q", g, v)
					return
				}
			}
		})
	}
	wg.Wait()
}
