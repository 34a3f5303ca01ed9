package runlimit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// source is an open-loop stream of calls of one tenant and class, at rate
// per second, each running for svc once it has its turn.
type source struct {
	tenant  string
	class   admission.Criticality
	rate    float64
	poisson bool // exponential gaps between calls, not a fixed period
}

// fairSim drives a Limiter with a fixed limit through its lanes, as the
// guard does, with injected time: calls arrive on schedule, are refused
// if their lane is not Admissible, else take a turn or wait for one; a
// waiter gives up when its patience runs out; a call with a turn runs
// for svc. It counts, per source, calls offered and served.
type fairSim struct {
	t        *testing.T
	l        *Limiter
	f        *Flow
	svc      time.Duration
	t0       time.Time
	now      time.Duration
	offered  []int
	served   []int
	refused  []int
	timedOut []int
}

func newFairSim(t *testing.T, limit int, svc time.Duration, opts ...Option) *fairSim {
	s := &fairSim{t: t, svc: svc, t0: time.Unix(1_700_000_000, 0)}
	opts = append([]Option{withClock(func() time.Time { return s.t0.Add(s.now) }), WithBounds(limit, limit), WithInitialLimit(limit)}, opts...)
	l, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	s.l, s.f = l, l.Flow("/svc/Call")
	return s
}

type simArrival struct {
	at  time.Duration
	src int
}

type simWaiter struct {
	w        *waiter
	ln       *Lane
	src      int
	since    time.Duration
	patience time.Duration
}

type simRun struct {
	t   Ticket
	end time.Duration
	src int
}

// run simulates d of the sources' traffic and returns, per source, the
// calls served in the last measured part of it (after warm).
func (s *fairSim) run(d, warm time.Duration, srcs []source) {
	rng := rand.New(rand.NewPCG(1, 2))
	var arrivals []simArrival
	for i, src := range srcs {
		period := time.Duration(float64(time.Second) / src.rate)
		for at := time.Duration(rng.Int64N(int64(period))); at < d; at += period {
			arrivals = append(arrivals, simArrival{at, i})
			if src.poisson {
				at += time.Duration(rng.ExpFloat64()*float64(period)) - period
			}
		}
	}
	slices.SortFunc(arrivals, func(a, b simArrival) int { return int(a.at - b.at) })
	s.offered = make([]int, len(srcs))
	s.served = make([]int, len(srcs))
	s.refused = make([]int, len(srcs))
	s.timedOut = make([]int, len(srcs))
	var waiters []simWaiter
	var running []simRun
	measured := func(src int, at time.Duration, counts []int) {
		if at >= warm {
			counts[src]++
		}
	}
	startRun := func(t Ticket, src int) {
		running = append(running, simRun{t: t, end: s.now + s.svc, src: src})
	}
	const step = 50 * time.Microsecond
	next := 0
	for s.now = 0; s.now < d; s.now += step {
		// Calls that end hand their turns on.
		kept := running[:0]
		for _, r := range running {
			if r.end <= s.now {
				r.t.Done(s.t0.Add(s.now), false)
				measured(r.src, s.now, s.served)
				continue
			}
			kept = append(kept, r)
		}
		running = kept
		// Waiters handed a turn start; those that waited too long leave.
		kw := waiters[:0]
		for _, w := range waiters {
			select {
			case <-w.w.ready:
				startRun(w.ln.granted(), w.src)
				continue
			default:
			}
			if s.now-w.since >= w.patience {
				w.ln.giveUp(w.w)
				measured(w.src, s.now, s.timedOut)
				continue
			}
			kw = append(kw, w)
		}
		waiters = kw
		// Arrivals.
		for ; next < len(arrivals) && arrivals[next].at <= s.now; next++ {
			a := arrivals[next]
			measured(a.src, s.now, s.offered)
			ln := s.f.Lane(srcs[a.src].tenant, srcs[a.src].class)
			if !ln.Admissible() {
				measured(a.src, s.now, s.refused)
				continue
			}
			cost := ln.reserve()
			if t, ok := s.f.TryAcquire(s.t0.Add(s.now)); ok {
				ln.unreserve(cost)
				t.ln = ln
				startRun(t, a.src)
				continue
			}
			t, w := ln.enqueue(cost)
			if w == nil {
				startRun(t, a.src)
				continue
			}
			waiters = append(waiters, simWaiter{w: w, ln: ln, src: a.src, since: s.now, patience: ln.patience()})
		}
	}
	for _, r := range running {
		r.t.Release()
	}
	for _, w := range waiters {
		w.ln.giveUp(w.w)
	}
}

// rate is what source i was served per second over the measured span.
func (s *fairSim) rate(i int, span time.Duration) float64 {
	return float64(s.served[i]) / span.Seconds()
}

// maxMin returns the max-min fair allocation of capacity among demands
// with weights.
func maxMin(capacity float64, demands, weights []float64) []float64 {
	alloc := make([]float64, len(demands))
	left := capacity
	open := make([]bool, len(demands))
	for i := range open {
		open[i] = true
	}
	for {
		var w float64
		for i, o := range open {
			if o {
				w += weights[i]
			}
		}
		if w == 0 || left <= 1e-9 {
			return alloc
		}
		level := left / w
		done := false
		for i, o := range open {
			if o && demands[i]-alloc[i] <= level*weights[i] {
				left -= demands[i] - alloc[i]
				alloc[i] = demands[i]
				open[i] = false
				done = true
			}
		}
		if !done {
			for i, o := range open {
				if o {
					alloc[i] += level * weights[i]
				}
			}
			return alloc
		}
	}
}

func TestFairShareConverges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limit   int
		svc     time.Duration
		demands []float64 // per tenant, calls per second
		d       time.Duration
	}{
		// Capacity 100/s: one greedy tenant at 10x beside a small one.
		{"2 tenants", 1, 10 * time.Millisecond, []float64{1000, 20}, 20 * time.Second},
		// Capacity 400/s: a greedy tenant, small ones, and some in between.
		{"10 tenants", 4, 10 * time.Millisecond, []float64{4000, 400, 100, 80, 60, 20, 20, 10, 10, 10}, 20 * time.Second},
		// Capacity 10000/s among 1000 tenants: half ask 2/s, half 40/s:
		// those get 18/s each.
		{"1000 tenants", 100, 10 * time.Millisecond, func() []float64 {
			d := make([]float64, 1000)
			for i := range d {
				d[i] = 2
				if i%2 == 1 {
					d[i] = 40
				}
			}
			return d
		}(), 6 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFairSim(t, tc.limit, tc.svc)
			srcs := make([]source, len(tc.demands))
			weights := make([]float64, len(tc.demands))
			for i, d := range tc.demands {
				srcs[i] = source{tenant: fmt.Sprintf("tenant-%d", i), rate: d}
				weights[i] = 1
			}
			warm := min(2*time.Second, tc.d/5)
			s.run(tc.d, warm, srcs)
			capacity := float64(tc.limit) * float64(time.Second) / float64(tc.svc)
			want := maxMin(capacity, tc.demands, weights)
			span := tc.d - warm
			var total float64
			var smallOffered, smallServed int
			for i := range srcs {
				got := s.rate(i, span)
				total += got
				if want[i] >= tc.demands[i]-1e-9 {
					// Below its fair share: served as it asks (each tenant at
					// least 90% of a few calls, all of them together 99%).
					smallOffered += s.offered[i]
					smallServed += s.served[i]
					if got < 0.9*float64(s.offered[i])/span.Seconds() {
						t.Errorf("tenant %d asks %.0f/s, under its share: served %.1f/s (%d refused, %d timed out), want >= 90%% of %d offered", i, tc.demands[i], got, s.refused[i], s.timedOut[i], s.offered[i])
					}
					continue
				}
				if math.Abs(got-want[i]) > 0.1*want[i] {
					t.Errorf("tenant %d asks %.0f/s: served %.1f/s, want its max-min share %.1f/s ± 10%%", i, tc.demands[i], got, want[i])
				}
			}
			if smallServed < smallOffered*99/100 {
				t.Errorf("tenants under their share were served %d of %d calls, want >= 99%%", smallServed, smallOffered)
			}
			if total < 0.95*capacity {
				t.Errorf("served %.0f/s in all, want >= 95%% of the capacity %.0f/s", total, capacity)
			}
		})
	}
}

func TestFairShareHonoursWeights(t *testing.T) {
	s := newFairSim(t, 2, 5*time.Millisecond, WithTenantWeights(map[string]float64{"gold": 3, "silver": 1}))
	srcs := []source{{tenant: "gold", rate: 2000}, {tenant: "silver", rate: 2000}, {tenant: "bronze", rate: 2000}}
	warm := 2 * time.Second
	s.run(22*time.Second, warm, srcs)
	span := 20 * time.Second
	gold, silver, bronze := s.rate(0, span), s.rate(1, span), s.rate(2, span)
	// Capacity 400/s shared 3:1:1.
	if r := gold / silver; math.Abs(r-3) > 0.05*3 {
		t.Errorf("gold/silver = %.3f (%.1f/s, %.1f/s), want 3 ± 5%%", r, gold, silver)
	}
	if r := silver / bronze; math.Abs(r-1) > 0.05 {
		t.Errorf("silver/bronze = %.3f (%.1f/s, %.1f/s), want 1 ± 5%%", r, silver, bronze)
	}
	if total := gold + silver + bronze; total < 0.95*400 {
		t.Errorf("served %.0f/s in all, want >= 95%% of 400/s", total)
	}
}

func TestClassesShedLowestFirst(t *testing.T) {
	classes := []admission.Criticality{admission.Sheddable, admission.SheddablePlus, admission.Critical, admission.CriticalPlus}
	// Capacity 200/s. Every mix of demands in {0, 50, 150, 400}/s per
	// class whose total exceeds the capacity.
	levels := []float64{0, 50, 150, 400}
	mixes := 0
	for m := 0; m < 256; m++ {
		demands := make([]float64, 4)
		var total float64
		for c := range demands {
			demands[c] = levels[(m>>(2*c))&3]
			total += demands[c]
		}
		if total <= 250 {
			continue
		}
		mixes++
		t.Run(fmt.Sprint(demands), func(t *testing.T) {
			s := newFairSim(t, 1, 5*time.Millisecond)
			var srcs []source
			var idx []int
			for c, d := range demands {
				if d > 0 {
					idx = append(idx, c)
					srcs = append(srcs, source{class: classes[c], rate: d})
				}
			}
			warm := time.Second
			span := 5 * time.Second
			s.run(warm+span, warm, srcs)
			// Served from the top class down.
			left := 200.0
			for j := len(srcs) - 1; j >= 0; j-- {
				want := min(srcs[j].rate, left)
				left -= want
				got := s.rate(j, span)
				offered := float64(s.offered[j]) / span.Seconds()
				switch {
				case want >= srcs[j].rate:
					if got < 0.99*offered {
						t.Errorf("class %v asks %.0f/s, which fits: served %.1f/s of %.1f offered (%d refused, %d timed out), want >= 99%%", classes[idx[j]], srcs[j].rate, got, offered, s.refused[j], s.timedOut[j])
					}
				case want == 0:
					if got > 0.05*200 {
						t.Errorf("class %v asks %.0f/s with no room left: served %.1f/s, want ~0", classes[idx[j]], srcs[j].rate, got)
					}
				default:
					if math.Abs(got-want) > 0.1*200 {
						t.Errorf("class %v asks %.0f/s with %.0f/s left: served %.1f/s", classes[idx[j]], srcs[j].rate, want, got)
					}
				}
			}
		})
	}
	if mixes < 100 {
		t.Fatalf("only %d mixes tried", mixes)
	}
}

func TestTenantFloodMemoryBounded(t *testing.T) {
	const maxTenants = 1000
	l := mustNew(t, WithMaxTenants(maxTenants))
	f := l.Flow("/svc/Call")
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	buf := make([]byte, 0, 32)
	for i := range 1_000_000 {
		buf = fmt.Appendf(buf[:0], "tenant-%d", i)
		ln := f.Lane(string(buf), admission.Critical)
		if i >= maxTenants && ln.Tenant() != OverflowTenant {
			t.Fatalf("tenant %d of a flood got its own lane %q beyond the cap of %d", i, ln.Tenant(), maxTenants)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := l.Tenants(); n != maxTenants {
		t.Errorf("Tenants() = %d after a million ids, want the cap %d", n, maxTenants)
	}
	// A tenant's lanes are about 4 × 100 bytes plus its map entry.
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > maxTenants*2048 {
		t.Errorf("the heap grew by %d bytes for a million ids, want under %d (the cap's worth)", grew, maxTenants*2048)
	}
	// A name longer than MaxTenantLen shares the overflow lanes too.
	long := string(make([]byte, 10<<10))
	if ln := f.Lane(long, admission.Sheddable); ln.Tenant() != OverflowTenant || ln.Class() != admission.Sheddable {
		t.Errorf("a 10KB tenant id got lane %q/%v, want %q/%v", ln.Tenant(), ln.Class(), OverflowTenant, admission.Sheddable)
	}
}

func TestIdleTenantsAreForgotten(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := mustNew(t, withClock(func() time.Time { return now }), WithMaxTenants(2))
	f := l.Flow("/svc/Call")
	f.Lane("a", admission.Critical)
	busy := f.Lane("b", admission.Critical)
	busy.reserve()
	if ln := f.Lane("c", admission.Critical); ln.Tenant() != OverflowTenant {
		t.Fatalf("third tenant beyond a cap of 2 got %q", ln.Tenant())
	}
	now = now.Add(tenantIdle + time.Second)
	l.upd.Lock()
	l.sweepTenants(l.allFlows(), l.nanos(now))
	l.upd.Unlock()
	if n := l.Tenants(); n != 1 {
		t.Errorf("after the idle time, Tenants() = %d, want 1 (b has a call waiting)", n)
	}
	if ln := f.Lane("c", admission.Critical); ln.Tenant() != "c" {
		t.Errorf("after a sweep, a new tenant got %q, want its own lane", ln.Tenant())
	}
	if ln := f.Lane("b", admission.Critical); ln != busy {
		t.Error("a tenant with a call waiting was forgotten")
	}
}

func TestTenantWeightsValidated(t *testing.T) {
	_, err := New(WithTenantWeights(map[string]float64{"a": 0, "b": -1, "": 1, "c": math.NaN(), "ok": 2}), WithMaxTenants(0))
	if err == nil {
		t.Fatal("New accepted bad weights")
	}
	for _, want := range []string{`weight of "a"`, `weight of "b"`, "empty tenant name", `weight of "c"`, "WithMaxTenants: n must be >= 1, got 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), `"ok"`) {
		t.Errorf("error %q names a good weight", err)
	}
}

// TestSmallTenantsAbsorbBursts: three small streams of critical calls
// (tenants A, B and C, 0.2 of the capacity each) arrive at random
// (Poisson), first alone, then while A floods with sheddable calls. Their
// bursts queue for longer than half the queue target now and then; while
// the critical class does not fill the server they must not be refused
// for it, alone or beside the flood.
func TestSmallTenantsAbsorbBursts(t *testing.T) {
	small := []source{
		{tenant: "A", class: admission.Critical, rate: 40, poisson: true},
		{tenant: "B", class: admission.Critical, rate: 40, poisson: true},
		{tenant: "C", class: admission.Critical, rate: 40, poisson: true},
	}
	flood := source{tenant: "A", class: admission.Sheddable, rate: 1800, poisson: true}
	for _, tt := range []struct {
		name string
		srcs []source
	}{
		{"alone", small},
		{"beside a flood", append(slices.Clone(small), flood)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Capacity 200/s: one call at a time of 5ms.
			s := newFairSim(t, 1, 5*time.Millisecond)
			warm, span := time.Second, 20*time.Second
			s.run(warm+span, warm, tt.srcs)
			for j, src := range small {
				t.Logf("%s %v: served %d of %d offered, %d refused, %d timed out", src.tenant, src.class, s.served[j], s.offered[j], s.refused[j], s.timedOut[j])
				if got := float64(s.served[j]) / float64(s.offered[j]); got < 0.99 {
					t.Errorf("%s %v: served %.2f%% of %d offered (%d refused, %d timed out), want >= 99%%",
						src.tenant, src.class, 100*got, s.offered[j], s.refused[j], s.timedOut[j])
				}
			}
			if len(tt.srcs) > len(small) {
				var total int
				for _, n := range s.served {
					total += n
				}
				if rate := float64(total) / span.Seconds(); rate < 0.95*200 {
					t.Errorf("served %.0f/s in all, want >= 95%% of 200/s", rate)
				}
			}
		})
	}
}
