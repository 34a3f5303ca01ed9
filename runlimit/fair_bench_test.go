package runlimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/ratelimit"
)

// tenantNames are the tenants of the benchmarks: a few hundred, as a
// multi-tenant server sees.
var tenantNames = func() []string {
	n := make([]string, 256)
	for i := range n {
		n[i] = fmt.Sprintf("tenant-%03d", i)
	}
	return n
}()

// BenchmarkFairAdmit is the fair-share admission of a call of a tenant
// and class: its lane found, Admissible, the reservation made and ended.
// Compare with BenchmarkKeyedAllow, the plain keyed bucket, in the same
// run.
func BenchmarkFairAdmit(b *testing.B) {
	l, err := New()
	if err != nil {
		b.Fatal(err)
	}
	f := l.Flow("/svc/Call")
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			ln := f.Lane(tenantNames[i&255], admission.Sheddable)
			if ln.Admissible() {
				ln.unreserve(ln.reserve())
			}
			i++
		}
	})
}

// BenchmarkKeyedAllow is the plain keyed token bucket of package
// ratelimit over the same keys, at a rate it never refuses (a finite one,
// so that each call takes its token).
func BenchmarkKeyedAllow(b *testing.B) {
	k, err := ratelimit.NewKeyed(ratelimit.Limit(1e9), 1000, ratelimit.WithSweepInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			k.Allow(tenantNames[i&255])
			i++
		}
	})
}

func TestFairAdmissionAllocatesNothing(t *testing.T) {
	l := mustNew(t, WithBounds(4, 4))
	g := NewGuard("run", l)
	st := g.(admission.Starter)
	c := admission.Call{Ctx: context.Background(), Method: "/svc/Call", Tenant: "acme", Class: admission.SheddablePlus}
	// Known tenant and flow (served once): the admitted path, turn taken
	// and returned.
	d := g.Admit(c)
	g.Finish(c, st.Start(c, d.Permit).Permit, admission.Outcome{Duration: time.Millisecond})
	if l.Stats().Flows != 1 {
		t.Fatal("the flow was not made by a call that succeeded")
	}
	allocs := testing.AllocsPerRun(1000, func() {
		c.Now = time.Now()
		d := g.Admit(c)
		if d.Refused {
			t.Fatal("refused")
		}
		d = st.Start(c, d.Permit)
		if d.Refused {
			t.Fatal("refused at start")
		}
		g.Finish(c, d.Permit, admission.Outcome{Duration: time.Millisecond})
	})
	if allocs != 0 {
		t.Errorf("admitted path of a tenant's call: %v allocs, want 0", allocs)
	}
}

// BenchmarkHandOff is a turn handed from call to call: a limit of one
// turn, as a saturated one-core server learns, and several goroutines
// each taking it, holding it for no work and giving it back, so that
// nearly every take waits for the turn and is woken by the release that
// hands it over.
func BenchmarkHandOff(b *testing.B) {
	l, err := New(WithBounds(1, 1))
	if err != nil {
		b.Fatal(err)
	}
	f := l.Flow("/svc/Call")
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			t, err := f.Acquire(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			t.Release()
		}
	})
}

// TestHandOffWithCancellations: callers that wait for the only turn and
// give up at random moments, some as the turn is handed to them, never
// hold more than the one turn at once, and leave none held or waited for
// at the end: a waiter kept for a later wait (recycle) is never woken by
// a handoff meant for its earlier wait.
func TestHandOffWithCancellations(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1))
	f := l.Flow("/svc/Call")
	var held, most atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration((g*7+i*13)%50)*time.Microsecond)
				tk, err := f.Acquire(ctx)
				cancel()
				if err != nil {
					continue // gave up waiting
				}
				n := held.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				held.Add(-1)
				tk.Release()
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m != 1 {
		t.Errorf("at most %d turns held at once, want 1", m)
	}
	if r, w := l.Running(), l.Waiting(); r != 0 || w != 0 {
		t.Errorf("at the end Running() = %d, Waiting() = %d, want 0 and 0", r, w)
	}
}
