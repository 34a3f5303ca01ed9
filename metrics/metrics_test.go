package metrics

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/retrybudget"
	"github.com/levee-go/levee/throttle"
)

// newGuardedServer returns a grpcguard.Server with two rules: "alloc"
// (a bucket of 2 tokens that never refills) and "get", in shadow mode (a
// bucket of 1 token that never refills).
func newGuardedServer(t *testing.T) *grpcguard.Server {
	t.Helper()
	s, err := grpcguard.New([]decide.Rule{
		{
			Name:    "alloc",
			Methods: []string{"/corecart.S/Allocate"},
			Guards:  []admission.Guard{ratelimit.NewGuard("global", mustLimiter(t, 0, 2))},
		},
		{
			Name:    "get",
			Methods: []string{"/corecart.S/Get"},
			Shadow:  true,
			Guards:  []admission.Guard{ratelimit.NewGuard("tight", mustLimiter(t, 0, 1))},
		},
	})
	if err != nil {
		t.Fatalf("grpcguard.New: %v", err)
	}
	return s
}

// callN makes n unary calls of method through s's interceptor and returns
// how many ended with RESOURCE_EXHAUSTED.
func callN(t *testing.T, s *grpcguard.Server, method string, n int) (refused int) {
	t.Helper()
	in := s.UnaryServerInterceptor()
	for range n {
		_, err := in(context.Background(), nil, unaryInfo(method), okHandler)
		switch status.Code(err) {
		case codes.OK:
		case codes.ResourceExhausted:
			refused++
		default:
			t.Fatalf("call %s: %v, want OK or RESOURCE_EXHAUSTED", method, err)
		}
	}
	return refused
}

func TestServerDecisions(t *testing.T) {
	s := newGuardedServer(t)
	r := newTestRegistry()
	if err := r.AddServer(s); err != nil {
		t.Fatalf("AddServer: %v", err)
	}
	if got := callN(t, s, "/corecart.S/Allocate", 3); got != 1 {
		t.Fatalf("3 Allocate calls against a 2-token bucket: %d refused, want 1", got)
	}
	if got := callN(t, s, "/corecart.S/Get", 3); got != 0 {
		t.Fatalf("3 Get calls under a shadow rule: %d refused, want 0", got)
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_decisions_total{guard="global",result="admitted",rule="alloc"}`:       "2",
		`levee_decisions_total{guard="global",result="refused",rule="alloc"}`:        "1",
		`levee_decisions_total{guard="global",result="shadow_refused",rule="alloc"}`: "0",
		`levee_decisions_total{guard="tight",result="admitted",rule="get"}`:          "1",
		`levee_decisions_total{guard="tight",result="refused",rule="get"}`:           "0",
		`levee_decisions_total{guard="tight",result="shadow_refused",rule="get"}`:    "2",
		// 2 admitted Allocate calls, and all 3 Get calls (shadow).
		`levee_handler_starts_total`: "5",
		// Called through the interceptors: no tap refusal.
		`levee_tap_refusals_pending`: "0",
		`levee_tap_refusals_total`:   "0",
		// The refusal by guard, reason and evidence; shadow refusals
		// refuse nothing.
		`levee_refusals_total{evidence="limit",guard="global",reason="RATE_LIMITED"}`: "1",
	}, "levee_")
}

// TestServerTypes checks the whole families, HELP and TYPE lines included,
// with the Prometheus client's own comparison.
func TestServerTypes(t *testing.T) {
	s := newGuardedServer(t)
	r := newTestRegistry()
	if err := r.AddServer(s); err != nil {
		t.Fatalf("AddServer: %v", err)
	}
	callN(t, s, "/corecart.S/Allocate", 3)
	want := `
# HELP levee_handler_starts_total Handlers started on calls guarded by the grpcguard Server.
# TYPE levee_handler_starts_total counter
levee_handler_starts_total 2
# HELP levee_decisions_total Decisions of each guard of each grpcguard rule, by result: admitted, refused, or shadow_refused (would have refused, let through by a shadow rule).
# TYPE levee_decisions_total counter
levee_decisions_total{guard="global",result="admitted",rule="alloc"} 2
levee_decisions_total{guard="global",result="refused",rule="alloc"} 1
levee_decisions_total{guard="global",result="shadow_refused",rule="alloc"} 0
levee_decisions_total{guard="tight",result="admitted",rule="get"} 0
levee_decisions_total{guard="tight",result="refused",rule="get"} 0
levee_decisions_total{guard="tight",result="shadow_refused",rule="get"} 0
# HELP levee_refusals_total Calls refused, by the refusing guard, the reason their google.rpc.ErrorInfo carries (RUN_QUEUE_FULL, CPU_OVERLOADED, SUSTAINED_OVERLOAD, ...) and the evidence of overload they were refused on (cpu, overrun, standing, lane, spike, memory, limit, none, ...).
# TYPE levee_refusals_total counter
levee_refusals_total{evidence="limit",guard="global",reason="RATE_LIMITED"} 1
# HELP levee_tap_refusals_pending Calls refused in the transport's tap whose deadline has not passed: grpc-go keeps each one's deadline timer and context (about 300 B) until then (docs/memory.md).
# TYPE levee_tap_refusals_pending gauge
levee_tap_refusals_pending 0
# HELP levee_tap_refusals_total Calls with a deadline refused in the transport's tap.
# TYPE levee_tap_refusals_total counter
levee_tap_refusals_total 0
`
	if err := testutil.GatherAndCompare(r, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// Two guards of one rule with the same name would give the same series
// twice, which fails a scrape; the collector sums them.
func TestServerDuplicateGuardNamesSummed(t *testing.T) {
	s, err := grpcguard.New([]decide.Rule{{
		Name:    "alloc",
		Methods: []string{"/corecart.S/Allocate"},
		Guards: []admission.Guard{
			ratelimit.NewGuard("rate", mustLimiter(t, 0, 3)),
			ratelimit.NewGuard("rate", mustLimiter(t, 0, 1)),
		},
	}})
	if err != nil {
		t.Fatalf("grpcguard.New: %v", err)
	}
	r := newTestRegistry()
	if err := r.AddServer(s); err != nil {
		t.Fatalf("AddServer: %v", err)
	}
	// Call 1: both admit. Calls 2 and 3: the first admits, the second
	// refuses. Sums: admitted 1+1 + 2 = 4, refused 2.
	if got := callN(t, s, "/corecart.S/Allocate", 3); got != 2 {
		t.Fatalf("refused %d calls, want 2", got)
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_decisions_total{guard="rate",result="admitted",rule="alloc"}`:       "4",
		`levee_decisions_total{guard="rate",result="refused",rule="alloc"}`:        "2",
		`levee_decisions_total{guard="rate",result="shadow_refused",rule="alloc"}`: "0",
	}, "levee_decisions_total")
}

// fakeClient is a StatsSource with fixed counts, as a grpcguard.Client
// reports them: one rule per (target, method) pair.
type fakeClient []admission.GuardStats

func (f fakeClient) Stats() []admission.GuardStats { return append([]admission.GuardStats(nil), f...) }

func TestClientDecisions(t *testing.T) {
	c := fakeClient{
		{Rule: "inventory:443 /corecart.S/Allocate", Guard: "breaker", Admitted: 7, Refused: 3},
		{Rule: "inventory:443 /corecart.S/Allocate", Guard: "throttle", Admitted: 10, Refused: 0},
	}
	r := newTestRegistry()
	if err := r.AddClient(c); err != nil {
		t.Fatalf("AddClient: %v", err)
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_client_decisions_total{guard="breaker",result="admitted",rule="inventory:443 /corecart.S/Allocate"}`:        "7",
		`levee_client_decisions_total{guard="breaker",result="refused",rule="inventory:443 /corecart.S/Allocate"}`:         "3",
		`levee_client_decisions_total{guard="breaker",result="shadow_refused",rule="inventory:443 /corecart.S/Allocate"}`:  "0",
		`levee_client_decisions_total{guard="throttle",result="admitted",rule="inventory:443 /corecart.S/Allocate"}`:       "10",
		`levee_client_decisions_total{guard="throttle",result="refused",rule="inventory:443 /corecart.S/Allocate"}`:        "0",
		`levee_client_decisions_total{guard="throttle",result="shadow_refused",rule="inventory:443 /corecart.S/Allocate"}`: "0",
	}, "levee_")
}

func TestCPUManual(t *testing.T) {
	m := mustManual(t, cpu.WithSmoothing(0), cpu.WithThreshold(0.5), cpu.WithCooldown(0))
	m.Update(t0, 0.75)
	r := newTestRegistry()
	if err := r.AddCPU(m); err != nil {
		t.Fatalf("AddCPU: %v", err)
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_cpu_info{source="manual"}`: "1",
		`levee_cpu_utilization`:           "0.75",
		`levee_cpu_utilization_raw`:       "0.75",
		`levee_cpu_saturated`:             "1",
		`levee_cpu_threshold`:             "0.5",
		`levee_cpu_samples_total`:         "0",
		`levee_cpu_late_samples_total`:    "0",
		`levee_cpu_sample_errors_total`:   "0",
	}, "levee_")

	// Below the threshold with no cooldown: no longer saturated.
	m.Update(t0.Add(time.Second), 0.25)
	got := scrape(t, r)
	for k, want := range map[string]string{
		`levee_cpu_utilization`: "0.25",
		`levee_cpu_saturated`:   "0",
	} {
		if got[k] != want {
			t.Errorf("after Update(0.25): %s = %q, want %s", k, got[k], want)
		}
	}
}

// fakeSource returns one fixed sample.
type fakeSource struct{ s cpu.Sample }

func (f fakeSource) Sample() (cpu.Sample, error) { return f.s, nil }
func (f fakeSource) String() string              { return "fake cgroup" }

func TestCPUThrottlingAndPressure(t *testing.T) {
	src := fakeSource{cpu.Sample{
		Time:          t0,
		Usage:         3 * time.Second,
		Allowance:     2,
		Quota:         1.5,
		HasThrottling: true,
		Throttling:    cpu.Throttling{Periods: 100, Throttled: 7, ThrottledTime: 250 * time.Millisecond},
		HasPressure:   true,
		Pressure: cpu.Pressure{
			Some: cpu.PressureLine{Avg10: 1, Total: 1500 * time.Millisecond},
			Full: cpu.PressureLine{Total: 500 * time.Millisecond},
		},
	}}
	// An hour between samples: the sampler never runs again in the test.
	m, err := cpu.NewMonitor(src, cpu.WithInterval(time.Hour))
	if err != nil {
		t.Fatalf("cpu.NewMonitor: %v", err)
	}
	defer m.Close()
	r := newTestRegistry()
	if err := r.AddCPU(m); err != nil {
		t.Fatalf("AddCPU: %v", err)
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_cpu_info{source="fake cgroup"}`:                  "1",
		`levee_cpu_utilization`:                                 "0",
		`levee_cpu_utilization_raw`:                             "0",
		`levee_cpu_saturated`:                                   "0",
		`levee_cpu_threshold`:                                   "0.8",
		`levee_cpu_samples_total`:                               "0",
		`levee_cpu_late_samples_total`:                          "0",
		`levee_cpu_sample_errors_total`:                         "0",
		`levee_cpu_allowance_cpus`:                              "2",
		`levee_cpu_quota_cpus`:                                  "1.5",
		`levee_cpu_cfs_periods_total`:                           "100",
		`levee_cpu_cfs_throttled_periods_total`:                 "7",
		`levee_cpu_cfs_throttled_seconds_total`:                 "0.25",
		`levee_cpu_pressure_stalled_seconds_total{kind="some"}`: "1.5",
		`levee_cpu_pressure_stalled_seconds_total{kind="full"}`: "0.5",
	}, "levee_")
}

func TestScale(t *testing.T) {
	c := mustController(t, loadshed.Step{}, nil)
	r := newTestRegistry()
	if err := r.AddScale("cpu", c); err != nil {
		t.Fatalf("AddScale: %v", err)
	}
	checkSeries(t, scrape(t, r), map[string]string{`levee_loadshed_scale{name="cpu"}`: "1"}, "levee_")
	c.Observe(t0, 0.9, true) // Step: 0.2 while saturated
	checkSeries(t, scrape(t, r), map[string]string{`levee_loadshed_scale{name="cpu"}`: "0.2"}, "levee_")
}

func TestLimiter(t *testing.T) {
	l := mustLimiter(t, 100, 10)
	l.SetScaleAt(t0, 0.5)
	r := newTestRegistry()
	if err := r.AddLimiter("global", l); err != nil {
		t.Fatalf("AddLimiter: %v", err)
	}
	if err := r.AddLimiter("open", mustLimiter(t, ratelimit.Inf, 1)); err != nil {
		t.Fatalf("AddLimiter: %v", err)
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_limit_rate{name="global"}`:  "50",
		`levee_limit_burst{name="global"}`: "5",
		`levee_limit_scale{name="global"}`: "0.5",
		`levee_limit_rate{name="open"}`:    "+Inf",
		`levee_limit_burst{name="open"}`:   "1",
		`levee_limit_scale{name="open"}`:   "1",
	}, "levee_")
}

func TestKeyed(t *testing.T) {
	// One shard holding one key, swept by hand.
	k := mustKeyed(t, 1, 1, ratelimit.WithMaxKeys(1), ratelimit.WithShards(1),
		ratelimit.WithSweepInterval(0), ratelimit.WithIdleTimeout(time.Second))
	defer k.Close()
	r := newTestRegistry()
	if err := r.AddKeyed("tenant", k); err != nil {
		t.Fatalf("AddKeyed: %v", err)
	}
	if !k.AllowN("a", t0, 1) {
		t.Fatal(`Keyed.AllowN("a", t0, 1) = false, want true`)
	}
	// The shard is full and a's bucket is not: b goes to the overflow bucket.
	k.AllowN("b", t0, 1)
	if n := k.Sweep(t0.Add(time.Hour)); n != 1 {
		t.Fatalf("Keyed.Sweep(t0+1h) = %d, want 1", n)
	}
	k.AllowN("c", t0.Add(time.Hour), 1)
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_keyed_keys{name="tenant"}`:            "1",
		`levee_keyed_evictions_total{name="tenant"}`: "1",
		`levee_keyed_overflows_total{name="tenant"}`: "1",
	}, "levee_")
}

func TestBulkhead(t *testing.T) {
	b := mustBulkhead(t, 3, bulkhead.WithQueue(1))
	tiny := mustBulkhead(t, 1, bulkhead.WithQueue(1), bulkhead.WithMaxWait(time.Millisecond))
	r := newTestRegistry()
	if err := r.AddBulkhead("alloc", b); err != nil {
		t.Fatalf("AddBulkhead: %v", err)
	}
	if err := r.AddBulkhead("tiny", tiny); err != nil {
		t.Fatalf("AddBulkhead: %v", err)
	}
	var held []bulkhead.Permit
	for i := range 3 {
		p, ok := b.TryAcquire()
		if !ok {
			t.Fatalf("TryAcquire #%d = false, want true", i+1)
		}
		held = append(held, p)
	}
	if _, ok := b.TryAcquire(); ok {
		t.Fatal("TryAcquire on a full bulkhead = true, want false")
	}
	// One call queues for a slot.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx)
		errc <- err
	}()
	for b.Waiting() != 1 {
		time.Sleep(time.Millisecond) // wait for the goroutine to queue; not a timing assertion
	}
	// The tiny bulkhead times out a queued call.
	tp, _ := tiny.TryAcquire()
	if _, err := tiny.Acquire(context.Background()); !errors.Is(err, bulkhead.ErrTimeout) {
		t.Fatalf("Acquire on a full bulkhead with a 1ms wait = %v, want ErrTimeout", err)
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_inflight{name="alloc"}`:                                "3",
		`levee_concurrency_limit{name="alloc"}`:                       "3",
		`levee_waiting{name="alloc"}`:                                 "1",
		`levee_bulkhead_calls_total{name="alloc",result="admitted"}`:  "3",
		`levee_bulkhead_calls_total{name="alloc",result="refused"}`:   "1",
		`levee_bulkhead_calls_total{name="alloc",result="timed_out"}`: "0",
		`levee_bulkhead_calls_total{name="alloc",result="canceled"}`:  "0",
		`levee_inflight{name="tiny"}`:                                 "1",
		`levee_concurrency_limit{name="tiny"}`:                        "1",
		`levee_waiting{name="tiny"}`:                                  "0",
		`levee_bulkhead_calls_total{name="tiny",result="admitted"}`:   "1",
		`levee_bulkhead_calls_total{name="tiny",result="refused"}`:    "0",
		`levee_bulkhead_calls_total{name="tiny",result="timed_out"}`:  "1",
		`levee_bulkhead_calls_total{name="tiny",result="canceled"}`:   "0",
	}, "levee_")

	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued Acquire after cancel = %v, want context.Canceled", err)
	}
	held[0].Release()
	tp.Release()
	b.SetLimit(5)
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_inflight{name="alloc"}`:                                "2",
		`levee_concurrency_limit{name="alloc"}`:                       "5",
		`levee_waiting{name="alloc"}`:                                 "0",
		`levee_bulkhead_calls_total{name="alloc",result="admitted"}`:  "3",
		`levee_bulkhead_calls_total{name="alloc",result="refused"}`:   "1",
		`levee_bulkhead_calls_total{name="alloc",result="timed_out"}`: "0",
		`levee_bulkhead_calls_total{name="alloc",result="canceled"}`:  "1",
	}, `levee_inflight{name="alloc"`, `levee_concurrency_limit{name="alloc"`, `levee_waiting{name="alloc"`, `levee_bulkhead_calls_total{name="alloc"`)
	for _, p := range held[1:] {
		p.Release()
	}
}

func TestAdaptive(t *testing.T) {
	a := mustAdaptive(t, bulkhead.WithInitialLimit(5))
	r := newTestRegistry()
	if err := r.AddAdaptive("allocate", a); err != nil {
		t.Fatalf("AddAdaptive: %v", err)
	}
	// A window of 10 calls of 10ms each, one at a time.
	now := t0
	for i := range 10 {
		p, ok := a.TryAcquire()
		if !ok {
			t.Fatalf("Adaptive.TryAcquire #%d = false, want true", i+1)
		}
		now = now.Add(10 * time.Millisecond)
		p.DoneAt(now, 10*time.Millisecond, nil)
	}
	held, ok := a.TryAcquire()
	if !ok {
		t.Fatal("Adaptive.TryAcquire #11 = false, want true")
	}
	defer held.Release()
	got := scrape(t, r)
	// The limit after a window depends on the adaptive algorithm; the
	// metric must show whatever the limiter says.
	checkSeries(t, got, map[string]string{
		`levee_inflight{name="allocate"}`:                                "1",
		`levee_concurrency_limit{name="allocate"}`:                       strconv.Itoa(a.Limit()),
		`levee_waiting{name="allocate"}`:                                 "0",
		`levee_bulkhead_calls_total{name="allocate",result="admitted"}`:  "11",
		`levee_bulkhead_calls_total{name="allocate",result="refused"}`:   "0",
		`levee_bulkhead_calls_total{name="allocate",result="timed_out"}`: "0",
		`levee_bulkhead_calls_total{name="allocate",result="canceled"}`:  "0",
		`levee_adaptive_min_latency_seconds{name="allocate"}`:            "0.01",
		`levee_adaptive_probes_total{name="allocate"}`:                   strconv.FormatUint(a.Probes(), 10),
	}, "levee_")
}

// newTrippedBreaker returns a breaker opened at t0 by 2 failures in a
// window of 4 calls, with one slow success, one late outcome, one
// duplicate Done and one rejected call.
func newTrippedBreaker(t *testing.T) *breaker.Breaker {
	t.Helper()
	b := mustBreaker(t, breaker.WithCountWindow(4), breaker.WithMinimumCalls(4),
		breaker.WithFailureRate(50), breaker.WithSlowCalls(time.Second, 100),
		breaker.WithWaitInOpen(time.Minute))
	var ps []breaker.Permit
	for i := range 5 {
		p, err := b.AllowAt(t0)
		if err != nil {
			t.Fatalf("Breaker.AllowAt(t0) #%d = %v, want a permit", i+1, err)
		}
		ps = append(ps, p)
	}
	fail := errors.New("backend failed")
	ps[0].Done(nil, 2*time.Second) // slow success
	ps[1].Done(nil, time.Millisecond)
	ps[1].Done(nil, time.Millisecond) // duplicate: records nothing
	ps[2].Done(fail, time.Millisecond)
	ps[3].Done(fail, time.Millisecond) // 2 of 4 failed: opens
	ps[4].Done(nil, time.Millisecond)  // late: admitted while closed
	if _, err := b.AllowAt(t0.Add(time.Second)); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Breaker.AllowAt(t0+1s) = %v, want ErrOpen", err)
	}
	return b
}

func TestBreaker(t *testing.T) {
	b := newTrippedBreaker(t)
	r := newTestRegistry()
	if err := r.AddBreaker("inventory", b); err != nil {
		t.Fatalf("AddBreaker: %v", err)
	}
	snap := b.Snapshot()
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_breaker_state{name="inventory",state="closed"}`:             "0",
		`levee_breaker_state{name="inventory",state="open"}`:               "1",
		`levee_breaker_state{name="inventory",state="half-open"}`:          "0",
		`levee_breaker_state{name="inventory",state="forced-open"}`:        "0",
		`levee_breaker_state{name="inventory",state="disabled"}`:           "0",
		`levee_breaker_outcomes_total{name="inventory",outcome="success"}`: "2",
		`levee_breaker_outcomes_total{name="inventory",outcome="failure"}`: "2",
		`levee_breaker_outcomes_total{name="inventory",outcome="ignored"}`: "0",
		`levee_breaker_outcomes_total{name="inventory",outcome="late"}`:    "1",
		`levee_breaker_slow_calls_total{name="inventory"}`:                 "1",
		`levee_breaker_rejected_total{name="inventory"}`:                   "1",
		`levee_breaker_state_changes_total{name="inventory"}`:              "1",
		`levee_breaker_duplicate_done_total{name="inventory"}`:             "1",
		// The open state's window, whatever the breaker reports for it.
		`levee_breaker_window_calls{name="inventory"}`:      strconv.FormatInt(snap.WindowCalls, 10),
		`levee_breaker_window_failures{name="inventory"}`:   strconv.FormatInt(snap.WindowFailures, 10),
		`levee_breaker_window_slow_calls{name="inventory"}`: strconv.FormatInt(snap.WindowSlowCalls, 10),
	}, "levee_")

	b.ForceOpen()
	got := scrape(t, r)
	for _, st := range []string{"closed", "open", "half-open", "forced-open", "disabled"} {
		k := `levee_breaker_state{name="inventory",state="` + st + `"}`
		want := "0"
		if st == "forced-open" {
			want = "1"
		}
		if got[k] != want {
			t.Errorf("after ForceOpen: %s = %q, want %s", k, got[k], want)
		}
	}
}

func TestThrottle(t *testing.T) {
	// Draws of 0.999 allow every call while P < 0.999; draws of 0 drop
	// every call while P > 0.
	draw := 0.999
	th := mustThrottle(t, throttle.WithWindow(10*time.Second, 10), throttle.WithRandom(func() float64 { return draw }), throttle.WithMinRequests(0))
	for i := range 10 {
		if !th.AllowAt(t0) {
			t.Fatalf("Throttle.AllowAt(t0) #%d = false, want true", i+1)
		}
	}
	for i := range 10 {
		th.RecordAt(t0, i < 2) // 2 of 10 accepted
	}
	// P = (10 − 2·2) / (10 + 1) = 6/11.
	draw = 0
	if th.AllowAt(t0) {
		t.Fatal("Throttle.AllowAt(t0) after 8 of 10 refused = true, want false")
	}
	r := newTestRegistry()
	if err := r.AddThrottle("inventory", th); err != nil {
		t.Fatalf("AddThrottle: %v", err)
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_throttle_probability{name="inventory"}`:                        strconv.FormatFloat(6.0/11, 'g', -1, 64),
		`levee_throttle_window_requests{name="inventory"}`:                    "10",
		`levee_throttle_window_accepts{name="inventory"}`:                     "2",
		`levee_throttle_decisions_total{name="inventory",result="allowed"}`:   "10",
		`levee_throttle_decisions_total{name="inventory",result="throttled"}`: "1",
	}, "levee_")

	// At the Registry's clock a window later, the counts have expired.
	r.now = func() time.Time { return t0.Add(time.Minute) }
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_throttle_probability{name="inventory"}`:                        "0",
		`levee_throttle_window_requests{name="inventory"}`:                    "0",
		`levee_throttle_window_accepts{name="inventory"}`:                     "0",
		`levee_throttle_decisions_total{name="inventory",result="allowed"}`:   "10",
		`levee_throttle_decisions_total{name="inventory",result="throttled"}`: "1",
	}, "levee_")
}

// TestRetryBudget reads a retry budget's window at the Registry's clock:
// the requests and retries counted over the window ending then, and the
// decisions since New.
func TestRetryBudget(t *testing.T) {
	b, err := retrybudget.New(retrybudget.WithRatio(0.1), retrybudget.WithWindow(10*time.Second, 10))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		b.RequestAt(t0)
	}
	for i, want := range []bool{true, true, false} { // 0.1 × 20 = 2 retries
		if got := b.TryRetryAt(t0); got != want {
			t.Fatalf("TryRetryAt(t0) #%d = %v, want %v", i+1, got, want)
		}
	}
	r := newTestRegistry()
	if err := r.AddRetryBudget("inventory", b); err != nil {
		t.Fatalf("AddRetryBudget: %v", err)
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_retry_budget_window_requests{name="inventory"}`:                  "20",
		`levee_retry_budget_window_retries{name="inventory"}`:                   "2",
		`levee_retry_budget_decisions_total{name="inventory",result="granted"}`: "2",
		`levee_retry_budget_decisions_total{name="inventory",result="refused"}`: "1",
	}, "levee_retry_budget")

	// At the Registry's clock a window later, the counts have expired.
	r.now = func() time.Time { return t0.Add(time.Minute) }
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_retry_budget_window_requests{name="inventory"}`:                  "0",
		`levee_retry_budget_window_retries{name="inventory"}`:                   "0",
		`levee_retry_budget_decisions_total{name="inventory",result="granted"}`: "2",
		`levee_retry_budget_decisions_total{name="inventory",result="refused"}`: "1",
	}, "levee_retry_budget")
}

// fixedScale is a Scaler with a constant scale.
type fixedScale float64

func (f fixedScale) Scale() float64 { return float64(f) }

// TestAll registers one guard of every kind on a Registry made by New and
// checks a few series of each in one scrape, and that the exposition passes
// the Prometheus client's linter (naming conventions, units, _total).
func TestAll(t *testing.T) {
	r := New()
	m := mustManual(t, cpu.WithSmoothing(0))
	m.Update(t0, 0.5)
	k := mustKeyed(t, 10, 10, ratelimit.WithSweepInterval(0))
	defer k.Close()
	for _, err := range []error{
		r.AddServer(newGuardedServer(t)),
		r.AddClient(fakeClient{{Rule: "inventory:443 /corecart.S/Get", Guard: "breaker", Admitted: 1}}),
		r.AddCPU(m),
		r.AddScale("cpu", fixedScale(0.5)),
		r.AddLimiter("global", mustLimiter(t, 10, 5)),
		r.AddKeyed("tenant", k),
		r.AddBulkhead("alloc", mustBulkhead(t, 4)),
		r.AddAdaptive("get", mustAdaptive(t)),
		r.AddBreaker("inventory", mustBreaker(t)),
		r.AddThrottle("inventory", mustThrottle(t)),
		r.AddRetryBudget("inventory", mustBudget(t)),
	} {
		if err != nil {
			t.Fatalf("registration: %v", err)
		}
	}
	got := scrape(t, r)
	for k, want := range map[string]string{
		`levee_decisions_total{guard="global",result="admitted",rule="alloc"}`: "0",
		`levee_cpu_utilization`:                                "0.5",
		`levee_loadshed_scale{name="cpu"}`:                     "0.5",
		`levee_limit_rate{name="global"}`:                      "10",
		`levee_keyed_keys{name="tenant"}`:                      "0",
		`levee_concurrency_limit{name="alloc"}`:                "4",
		`levee_concurrency_limit{name="get"}`:                  "20",
		`levee_breaker_state{name="inventory",state="closed"}`: "1",
		`levee_throttle_probability{name="inventory"}`:         "0",
	} {
		if got[k] != want {
			t.Errorf("scrape: %s = %q, want %s", k, got[k], want)
		}
	}
	for k := range got {
		if !strings.HasPrefix(k, "levee_") {
			t.Errorf("series %s: without WithRuntimeMetrics every name starts with levee_", k)
		}
	}
	problems, err := testutil.GatherAndLint(r)
	if err != nil {
		t.Fatalf("GatherAndLint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestRuntimeMetrics(t *testing.T) {
	tests := []struct {
		name string
		give []Option
		want bool
	}{
		{name: "default", give: nil, want: false},
		{name: "WithRuntimeMetrics", give: []Option{WithRuntimeMetrics()}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := scrape(t, New(tt.give...))
			_, goroutines := got["go_goroutines"]
			if goroutines != tt.want {
				t.Errorf("New(%s) serves go_goroutines: %v, want %v", tt.name, goroutines, tt.want)
			}
		})
	}
}

// TestScrapeChangesNothing drives every kind of guard, scrapes three times
// and checks that the guards read exactly as before and every scrape was
// the same.
func TestScrapeChangesNothing(t *testing.T) {
	r := newTestRegistry()

	s := newGuardedServer(t)
	callN(t, s, "/corecart.S/Allocate", 3)
	m := mustManual(t, cpu.WithSmoothing(0))
	m.Update(t0, 0.9)
	ctl := mustController(t, loadshed.Step{}, nil)
	ctl.Observe(t0, 0.9, true)
	l := mustLimiter(t, 1, 5)
	l.AllowN(t0, 3)
	k := mustKeyed(t, 1, 2, ratelimit.WithSweepInterval(0))
	defer k.Close()
	k.AllowN("a", t0, 1)
	bh := mustBulkhead(t, 2)
	p, _ := bh.TryAcquire()
	defer p.Release()
	ad := mustAdaptive(t)
	ap, _ := ad.TryAcquire()
	defer ap.Release()
	br := newTrippedBreaker(t) // open since t0; its wait is long over by the wall clock
	th := mustThrottle(t, throttle.WithWindow(10*time.Second, 10))
	th.AllowAt(t0)
	th.RecordAt(t0, false)

	for _, err := range []error{
		r.AddServer(s), r.AddCPU(m), r.AddScale("cpu", ctl), r.AddLimiter("l", l),
		r.AddKeyed("k", k), r.AddBulkhead("b", bh), r.AddAdaptive("a", ad),
		r.AddBreaker("br", br), r.AddThrottle("th", th),
	} {
		if err != nil {
			t.Fatalf("registration: %v", err)
		}
	}

	type state struct {
		server            []admission.GuardStats
		starts            uint64
		cpu               cpu.Stats
		scale             float64
		tokens            float64
		keyed             ratelimit.KeyedStats
		keyTokens         float64
		bhStats, adStats  bulkhead.Stats
		bhIn, adIn, adLim int
		breaker           breaker.Snapshot
		throttle          throttle.Snapshot
	}
	read := func() state {
		return state{
			server: s.Stats(), starts: s.HandlerStarts(),
			cpu: m.Stats(), scale: ctl.Scale(),
			tokens: l.Tokens(t0), keyed: k.Stats(), keyTokens: k.Tokens("a", t0),
			bhStats: bh.Stats(), bhIn: bh.InFlight(),
			adStats: ad.Stats(), adIn: ad.InFlight(), adLim: ad.Limit(),
			breaker: br.Snapshot(), throttle: th.SnapshotAt(t0),
		}
	}
	before := read()
	first := scrapeBody(t, r)
	for range 2 {
		if again := scrapeBody(t, r); again != first {
			t.Fatalf("a second scrape differs from the first:\n%s\nvs\n%s", again, first)
		}
	}
	after := read()
	if !equalState(before.server, after.server) || before.starts != after.starts {
		t.Errorf("grpcguard.Server stats changed by scraping: %+v, %d → %+v, %d", before.server, before.starts, after.server, after.starts)
	}
	if before.cpu != after.cpu || before.scale != after.scale {
		t.Errorf("cpu or scale changed by scraping: %+v %v → %+v %v", before.cpu, before.scale, after.cpu, after.scale)
	}
	if before.tokens != after.tokens || before.keyed != after.keyed || before.keyTokens != after.keyTokens {
		t.Errorf("buckets changed by scraping: %v %+v %v → %v %+v %v", before.tokens, before.keyed, before.keyTokens, after.tokens, after.keyed, after.keyTokens)
	}
	if before.bhStats != after.bhStats || before.bhIn != after.bhIn || before.adStats != after.adStats || before.adIn != after.adIn || before.adLim != after.adLim {
		t.Errorf("bulkheads changed by scraping")
	}
	if before.breaker != after.breaker {
		t.Errorf("Breaker.Snapshot changed by scraping: %+v → %+v", before.breaker, after.breaker)
	}
	if after.breaker.State != breaker.StateOpen {
		t.Errorf("Breaker.Snapshot().State after scraping = %v, want open (no due transition made)", after.breaker.State)
	}
	if before.throttle != after.throttle {
		t.Errorf("Throttle.SnapshotAt(t0) changed by scraping: %+v → %+v", before.throttle, after.throttle)
	}
	// The breaker's wait is over at t0+2m: a collector that asked for its
	// State would have moved it to half-open. Scraping did not, but the
	// breaker itself does when asked.
	if got := br.StateAt(t0.Add(2 * time.Minute)); got != breaker.StateHalfOpen {
		t.Errorf("Breaker.StateAt(t0+2m) = %v, want half-open", got)
	}
}

func equalState(a, b []admission.GuardStats) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRegistrationErrors(t *testing.T) {
	s := newGuardedServer(t)
	var nilCtl *loadshed.Controller
	tests := []struct {
		name    string
		give    func(r *Registry) error
		wantIs  error
		wantMsg string
	}{
		{"nil server", func(r *Registry) error { return r.AddServer(nil) }, ErrInvalid,
			"metrics: invalid registration: AddServer: nil ServerSource"},
		{"nil client", func(r *Registry) error { return r.AddClient(nil) }, ErrInvalid,
			"metrics: invalid registration: AddClient: nil StatsSource"},
		{"second client", func(r *Registry) error {
			if err := r.AddClient(fakeClient{}); err != nil {
				return err
			}
			return r.AddClient(fakeClient{})
		}, ErrDuplicate, "metrics: already registered: AddClient: a client is already registered (one per Registry)"},
		{"nil monitor", func(r *Registry) error { return r.AddCPU(nil) }, ErrInvalid,
			"metrics: invalid registration: AddCPU: nil *cpu.Monitor"},
		{"nil scaler", func(r *Registry) error { return r.AddScale("cpu", nil) }, ErrInvalid,
			`metrics: invalid registration: AddScale("cpu"): nil Scaler`},
		{"typed nil scaler", func(r *Registry) error { return r.AddScale("cpu", nilCtl) }, ErrInvalid,
			`metrics: invalid registration: AddScale("cpu"): nil Scaler`},
		{"nil limiter", func(r *Registry) error { return r.AddLimiter("l", nil) }, ErrInvalid,
			`metrics: invalid registration: AddLimiter("l"): nil *ratelimit.Limiter`},
		{"nil keyed", func(r *Registry) error { return r.AddKeyed("k", nil) }, ErrInvalid,
			`metrics: invalid registration: AddKeyed("k"): nil *ratelimit.Keyed`},
		{"nil bulkhead", func(r *Registry) error { return r.AddBulkhead("b", nil) }, ErrInvalid,
			`metrics: invalid registration: AddBulkhead("b"): nil *bulkhead.Bulkhead`},
		{"nil adaptive", func(r *Registry) error { return r.AddAdaptive("a", nil) }, ErrInvalid,
			`metrics: invalid registration: AddAdaptive("a"): nil *bulkhead.Adaptive`},
		{"nil breaker", func(r *Registry) error { return r.AddBreaker("b", nil) }, ErrInvalid,
			`metrics: invalid registration: AddBreaker("b"): nil *breaker.Breaker`},
		{"nil throttle", func(r *Registry) error { return r.AddThrottle("t", nil) }, ErrInvalid,
			`metrics: invalid registration: AddThrottle("t"): nil *throttle.Throttle`},
		{"nil retry budget", func(r *Registry) error { return r.AddRetryBudget("r", nil) }, ErrInvalid,
			`metrics: invalid registration: AddRetryBudget("r"): nil *retrybudget.Budget`},
		{"second retry budget of a name", func(r *Registry) error {
			if err := r.AddRetryBudget("r", mustBudget(t)); err != nil {
				return err
			}
			return r.AddRetryBudget("r", mustBudget(t))
		}, ErrDuplicate, `metrics: already registered: AddRetryBudget("r"): a retry budget named "r" is already registered`},
		{"nil collector", func(r *Registry) error { return r.Register(nil) }, ErrInvalid,
			"metrics: invalid registration: Register: nil collector"},
		{"empty name", func(r *Registry) error { return r.AddLimiter("", mustLimiter(t, 1, 1)) }, ErrInvalid,
			"metrics: invalid registration: AddLimiter: empty name"},
		{"name not UTF-8", func(r *Registry) error { return r.AddBulkhead("a\xff", mustBulkhead(t, 1)) }, ErrInvalid,
			`metrics: invalid registration: AddBulkhead("a\xff"): name is not valid UTF-8`},
		{"second server", func(r *Registry) error {
			if err := r.AddServer(s); err != nil {
				return err
			}
			return r.AddServer(newGuardedServer(t))
		}, ErrDuplicate, "metrics: already registered: AddServer: a server is already registered (one per Registry)"},
		{"second monitor", func(r *Registry) error {
			if err := r.AddCPU(mustManual(t)); err != nil {
				return err
			}
			return r.AddCPU(mustManual(t))
		}, ErrDuplicate, "metrics: already registered: AddCPU: a *cpu.Monitor is already registered (one per Registry)"},
		{"duplicate breaker", func(r *Registry) error {
			if err := r.AddBreaker("inventory", mustBreaker(t)); err != nil {
				return err
			}
			return r.AddBreaker("inventory", mustBreaker(t))
		}, ErrDuplicate, `metrics: already registered: AddBreaker("inventory"): a breaker named "inventory" is already registered`},
		{"adaptive named like a bulkhead", func(r *Registry) error {
			if err := r.AddBulkhead("alloc", mustBulkhead(t, 1)); err != nil {
				return err
			}
			return r.AddAdaptive("alloc", mustAdaptive(t))
		}, ErrDuplicate, `metrics: already registered: AddAdaptive("alloc"): a bulkhead named "alloc" is already registered`},
		{"collector colliding with levee's", func(r *Registry) error {
			if err := r.AddScale("cpu", fixedScale(1)); err != nil {
				return err
			}
			return r.Register(newScaleCollector("cpu", fixedScale(1)))
		}, nil, "duplicate metrics collector registration attempted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give(newTestRegistry())
			if err == nil {
				t.Fatalf("err = nil, want %q", tt.wantMsg)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("errors.Is(%v, %v) = false, want true", err, tt.wantIs)
			}
			if tt.wantIs != nil && err.Error() != tt.wantMsg {
				t.Errorf("err = %q, want %q", err, tt.wantMsg)
			}
			if tt.wantIs == nil && !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err = %q, want it to contain %q", err, tt.wantMsg)
			}
		})
	}
}

// A failed registration leaves the Registry as it was, and a name may be
// reused across kinds.
func TestFailedRegistrationChangesNothing(t *testing.T) {
	r := newTestRegistry()
	if err := r.AddLimiter("x", mustLimiter(t, 10, 1)); err != nil {
		t.Fatalf("AddLimiter: %v", err)
	}
	if err := r.AddLimiter("x", mustLimiter(t, 20, 1)); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second AddLimiter(\"x\") = %v, want ErrDuplicate", err)
	}
	if err := r.AddBulkhead("x", mustBulkhead(t, 3)); err != nil {
		t.Fatalf("AddBulkhead(\"x\") beside a limiter \"x\" = %v, want nil", err)
	}
	checkSeries(t, scrape(t, r), map[string]string{
		`levee_limit_rate{name="x"}`:                              "10",
		`levee_limit_burst{name="x"}`:                             "1",
		`levee_limit_scale{name="x"}`:                             "1",
		`levee_inflight{name="x"}`:                                "0",
		`levee_concurrency_limit{name="x"}`:                       "3",
		`levee_waiting{name="x"}`:                                 "0",
		`levee_bulkhead_calls_total{name="x",result="admitted"}`:  "0",
		`levee_bulkhead_calls_total{name="x",result="refused"}`:   "0",
		`levee_bulkhead_calls_total{name="x",result="timed_out"}`: "0",
		`levee_bulkhead_calls_total{name="x",result="canceled"}`:  "0",
	}, "levee_")
}

// TestConcurrentScrape scrapes and registers while traffic runs, under
// -race, and checks that the last scrape counts every call.
func TestConcurrentScrape(t *testing.T) {
	r := newTestRegistry()
	b := mustBulkhead(t, 4)
	l := mustLimiter(t, ratelimit.Inf, 1)
	if err := r.AddBulkhead("b", b); err != nil {
		t.Fatal(err)
	}
	if err := r.AddLimiter("l", l); err != nil {
		t.Fatal(err)
	}
	const workers, calls = 4, 2000
	var wg sync.WaitGroup
	admitted := make([]int, workers)
	for w := range workers {
		wg.Go(func() {
			for range calls {
				if p, ok := b.TryAcquire(); ok {
					admitted[w]++
					l.Allow()
					p.Release()
				}
			}
		})
	}
	done := make(chan struct{})
	var scrapes sync.WaitGroup
	scrapes.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			scrapeBody(t, r)
			if i < 20 {
				if err := r.AddLimiter("extra"+strconv.Itoa(i), mustLimiter(t, 1, 1)); err != nil {
					t.Errorf("AddLimiter during scrapes: %v", err)
				}
			}
		}
	})
	wg.Wait()
	close(done)
	scrapes.Wait()
	total := 0
	for _, n := range admitted {
		total += n
	}
	got := scrape(t, r)
	want := map[string]string{
		`levee_bulkhead_calls_total{name="b",result="admitted"}`: strconv.Itoa(total),
		`levee_bulkhead_calls_total{name="b",result="refused"}`:  strconv.Itoa(workers*calls - total),
		`levee_inflight{name="b"}`:                               "0",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("after the traffic: %s = %q, want %s", k, got[k], v)
		}
	}
}
