package metrics

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/ratelimit"
)

// TestHotPathAllocs checks that the admission paths of registered guards
// still allocate nothing: registering adds no code to them, the collectors
// read the guards only when scraped. A scrape is made first, so that any
// lazily built state would already exist.
func TestHotPathAllocs(t *testing.T) {
	r := newTestRegistry()
	l := mustLimiter(t, ratelimit.Inf, 1)
	k := mustKeyed(t, ratelimit.Inf, 1, ratelimit.WithSweepInterval(0))
	defer k.Close()
	b := mustBulkhead(t, 4)
	a := mustAdaptive(t)
	br := mustBreaker(t)
	th := mustThrottle(t)
	m := mustManual(t)
	ctl := mustController(t, loadshed.AIMD{}, []loadshed.Target{l})
	for _, err := range []error{
		r.AddLimiter("l", l), r.AddKeyed("k", k), r.AddBulkhead("b", b), r.AddAdaptive("a", a),
		r.AddBreaker("br", br), r.AddThrottle("th", th), r.AddCPU(m), r.AddScale("cpu", ctl),
	} {
		if err != nil {
			t.Fatalf("registration: %v", err)
		}
	}
	scrape(t, r)
	k.AllowN("tenant", t0, 1) // the key's bucket exists before measuring

	tests := []struct {
		name string
		give func()
	}{
		{"Limiter.AllowN", func() { l.AllowN(t0, 1) }},
		{"Keyed.AllowN", func() { k.AllowN("tenant", t0, 1) }},
		{"Bulkhead.TryAcquire+Release", func() {
			if p, ok := b.TryAcquire(); ok {
				p.Release()
			}
		}},
		{"Adaptive.TryAcquire+DoneAt", func() {
			if p, ok := a.TryAcquire(); ok {
				p.DoneAt(t0, time.Millisecond, nil)
			}
		}},
		{"Breaker.AllowAt+Done", func() {
			if p, err := br.AllowAt(t0); err == nil {
				p.Done(nil, time.Millisecond)
			}
		}},
		{"Throttle.AllowAt+RecordAt", func() {
			if th.AllowAt(t0) {
				th.RecordAt(t0, true)
			}
		}},
		{"Monitor.Utilization+Saturated", func() { _, _ = m.Utilization(), m.Saturated() }},
		{"Controller.Scale", func() { _ = ctl.Scale() }},
	}
	for _, tt := range tests {
		if got := testing.AllocsPerRun(1000, tt.give); got != 0 {
			t.Errorf("%s on a registered guard: %v allocs per call, want 0", tt.name, got)
		}
	}
}

// TestServerPathAllocsUnchanged checks that registering a grpcguard.Server
// leaves the allocations of its interceptor's admitted path as they were.
func TestServerPathAllocsUnchanged(t *testing.T) {
	call := func(s *grpcguard.Server) func() {
		in := s.UnaryServerInterceptor()
		info := unaryInfo("/corecart.S/Allocate")
		ctx := context.Background()
		return func() { in(ctx, nil, info, okHandler) }
	}
	bare := newBenchServer(t)
	registered := newBenchServer(t)
	r := newTestRegistry()
	if err := r.AddServer(registered); err != nil {
		t.Fatalf("AddServer: %v", err)
	}
	scrape(t, r)
	want := testing.AllocsPerRun(1000, call(bare))
	if got := testing.AllocsPerRun(1000, call(registered)); got != want {
		t.Errorf("interceptor on a registered Server: %v allocs per call, want %v as without metrics", got, want)
	}
}

// newBenchServer returns a Server whose "alloc" rule admits every call
// through an infinite bucket and a bulkhead of 1024 slots (calls run one at a time).
func newBenchServer(tb testing.TB) *grpcguard.Server {
	tb.Helper()
	s, err := grpcguard.New([]decide.Rule{{
		Name:    "alloc",
		Methods: []string{"/corecart.S/Allocate"},
		Guards: []admission.Guard{
			ratelimit.NewGuard("global", mustLimiter(tb, ratelimit.Inf, 1)),
			bulkhead.NewGuard("slots", mustBulkhead(tb, 1024), 0),
		},
	}})
	if err != nil {
		tb.Fatalf("grpcguard.New: %v", err)
	}
	return s
}

// BenchmarkAdmit measures one admission of a guard, bare, registered in a
// Registry, and — the peer — bare plus the conventional instrumentation of
// incrementing a Prometheus CounterVec on every call, which is what reading
// at scrape time avoids.
func BenchmarkAdmit(b *testing.B) {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "calls_total", Help: "Calls."}, []string{"name", "result"})
	for _, mode := range []string{"bare", "registered", "countervec"} {
		b.Run("Bulkhead/"+mode, func(b *testing.B) {
			bh := mustBulkhead(b, 4)
			if mode == "registered" {
				r := New()
				if err := r.AddBulkhead("slots", bh); err != nil {
					b.Fatal(err)
				}
			}
			count := mode == "countervec"
			b.ReportAllocs()
			for b.Loop() {
				if p, ok := bh.TryAcquire(); ok {
					if count {
						calls.WithLabelValues("slots", "admitted").Inc()
					}
					p.Release()
				}
			}
		})
		b.Run("Server/"+mode, func(b *testing.B) {
			s := newBenchServer(b)
			if mode == "registered" {
				r := New()
				if err := r.AddServer(s); err != nil {
					b.Fatal(err)
				}
			}
			in := s.UnaryServerInterceptor()
			info := unaryInfo("/corecart.S/Allocate")
			ctx := context.Background()
			count := mode == "countervec"
			b.ReportAllocs()
			for b.Loop() {
				in(ctx, nil, info, okHandler)
				if count {
					// One counter per guard, as the Server counts.
					calls.WithLabelValues("global", "admitted").Inc()
					calls.WithLabelValues("slots", "admitted").Inc()
				}
			}
		})
	}
}

// BenchmarkScrape measures one Gather of a Registry holding one guard of
// every kind, against — the peer — a Prometheus registry holding as many
// series stored in a GaugeVec, the conventional instrumentation.
func BenchmarkScrape(b *testing.B) {
	r := New()
	m := mustManual(b)
	k := mustKeyed(b, 10, 10, ratelimit.WithSweepInterval(0))
	defer k.Close()
	for _, err := range []error{
		r.AddServer(newBenchServer(b)), r.AddCPU(m), r.AddScale("cpu", mustController(b, loadshed.AIMD{}, nil)),
		r.AddLimiter("global", mustLimiter(b, 10, 5)), r.AddKeyed("tenant", k),
		r.AddBulkhead("slots", mustBulkhead(b, 4)), r.AddAdaptive("get", mustAdaptive(b)),
		r.AddBreaker("inventory", mustBreaker(b)), r.AddThrottle("inventory", mustThrottle(b)),
	} {
		if err != nil {
			b.Fatal(err)
		}
	}
	mfs, err := r.Gather()
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	b.Run("levee", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Gather(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n), "series")
	})
	b.Run("gaugevec", func(b *testing.B) {
		reg := prometheus.NewRegistry()
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g", Help: "G."}, []string{"name"})
		reg.MustRegister(g)
		for i := range n {
			g.WithLabelValues(strconv.Itoa(i)).Set(float64(i))
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n), "series")
	})
}
