package policy

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/guardtest"
	"github.com/levee-go/levee/runlimit"
)

// observedPolicy has three run limits, the preset's ("run") and two
// rules' ("lim", "spare"), and a bucket of one token an hour on
// EmptyCall ("bucket").
const observedPolicy = `
preset: {max_concurrency: 32, cpu: false, memory: false}
rules:
  - name: r
    methods: [/svc/Call]
    guards: [{type: runlimit, name: lim, max_limit: 100}]
  - name: r2
    methods: [/svc/Other]
    guards: [{type: runlimit, name: spare}]
  - name: rate
    methods: [/grpc.testing.TestService/EmptyCall]
    guards: [{type: ratelimit, name: bucket, rate: 1/h, burst: 1}]
`

// runLimits returns the run limits of the policy in force, by rule and
// guard name, and fails t unless it has those named.
func runLimits(t *testing.T, r *Reloader, names ...string) map[string]*runlimit.Limiter {
	t.Helper()
	out := map[string]*runlimit.Limiter{}
	for name, g := range instances(r) {
		if rl, ok := g.(interface{ Limiter() *runlimit.Limiter }); ok {
			out[name] = rl.Limiter()
		}
	}
	for _, name := range names {
		if out[name] == nil {
			t.Fatalf("policy in force has no run limit %s: %v", name, out)
		}
	}
	return out
}

// checkToldMoves drives l through a baseline probe at explicit instants
// from now and fails t unless o is told of exactly l's moves, as guard's
// (or, told false, of none). It returns the instant after the calls.
func checkToldMoves(t *testing.T, o *guardtest.Observed, l *runlimit.Limiter, guard string, now time.Time, told bool) time.Time {
	t.Helper()
	before := len(l.Moves())
	now = guardtest.LearnBaseline(t, l, "/svc/Call", now, 10*time.Millisecond, 300)
	moves := l.Moves()[before:]
	if len(moves) == 0 {
		t.Fatalf("run limit %s did not move in 300 calls alone: no move to tell", guard)
	}
	_, got := o.Take()
	if !told {
		if len(got) != 0 {
			t.Errorf("OnLimitChange told %v from a run limit no longer in force, want nothing", got)
		}
		return now
	}
	if len(got) != len(moves) {
		t.Fatalf("run limit %s moved %d times (%v), OnLimitChange told %d (%v)", guard, len(moves), moves, len(got), got)
	}
	for i, m := range moves {
		c := got[i]
		if c.Guard != guard || c.From != m.From || c.To != m.To || !strings.HasPrefix(c.Cause, string(m.Cause)) || !c.Time.Equal(m.At) {
			t.Errorf("move %d of %s is %+v, OnLimitChange told %+v", i, guard, m, c)
		}
	}
	return now
}

// refuseOnce makes two calls to EmptyCall, whose bucket holds one token,
// and returns what OnRefusal was told of the second one's refusal.
func refuseOnce(t *testing.T, r *Reloader, o *guardtest.Observed) []decide.RefusalEvent {
	t.Helper()
	call := func() error {
		_, err := r.Server().UnaryServerInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: emptyCall},
			func(context.Context, any) (any, error) { return nil, nil })
		return err
	}
	if err := call(); err != nil {
		t.Fatalf("first call with a token in the bucket: %v", err)
	}
	if err := call(); err == nil {
		t.Fatal("second call with the bucket empty admitted, want refused")
	}
	refusals, _ := o.Take()
	return refusals
}

// The engine's Observer is told of the moves of every run limit a policy
// builds, the preset's and a rule's, and of those a reload builds anew,
// and of refusals after a reload; not of the moves of a run limit the
// reload dropped. Before, no run limit of a policy was wired to
// OnLimitChange: it was told of no move, before a reload or after.
func TestObserverToldAcrossReload(t *testing.T) {
	r, path, _ := newTestReloader(t, observedPolicy, WithoutCPU(), WithoutMemory())
	o := &guardtest.Observed{}
	r.Engine().SetObserver(o.Observer())

	old := runLimits(t, r, "default/run", "r/lim", "r2/spare")
	now := time.Now()
	now = checkToldMoves(t, o, old["default/run"], "run", now, true)
	now = checkToldMoves(t, o, old["r/lim"], "lim", now, true)
	if got := refuseOnce(t, r, o); len(got) != 1 || got[0].Guard != "bucket" {
		t.Errorf("OnRefusal told %+v before the reload, want one refusal by bucket", got)
	}

	// New bounds: new run limits; rule r2 gone; a new rate: a new, full
	// bucket.
	changed := strings.NewReplacer("max_concurrency: 32", "max_concurrency: 33", "max_limit: 100", "max_limit: 101", "rate: 1/h", "rate: 2/h",
		"  - name: r2\n    methods: [/svc/Other]\n    guards: [{type: runlimit, name: spare}]\n", "").Replace(observedPolicy)
	if strings.Contains(changed, "spare") {
		t.Fatal("rule r2 still in the changed policy")
	}
	write(t, path, changed)
	if err := r.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	cur := runLimits(t, r, "default/run", "r/lim")
	for name, l := range cur {
		if l == old[name] {
			t.Fatalf("run limit %s kept across a reload that changed its bounds", name)
		}
	}
	now = checkToldMoves(t, o, cur["default/run"], "run", now, true)
	now = checkToldMoves(t, o, cur["r/lim"], "lim", now, true)
	checkToldMoves(t, o, old["r2/spare"], "spare", now, false)
	if got := refuseOnce(t, r, o); len(got) != 1 || got[0].Guard != "bucket" {
		t.Errorf("OnRefusal told %+v after the reload, want one refusal by bucket", got)
	}
}
