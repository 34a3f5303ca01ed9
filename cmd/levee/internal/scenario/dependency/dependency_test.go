package dependency

import (
	"context"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	"github.com/levee-go/levee/cmd/levee/internal/scenario/scenariotest"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
	"github.com/levee-go/levee/internal/harness/target"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIncidentHitsAt(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name  string
		share float64
		give  []time.Duration // arrivals, from t0
		want  []bool
	}{
		{name: "outside the window", share: 1, give: []time.Duration{-time.Nanosecond, 10 * time.Second, 11 * time.Second}, want: []bool{false, false, false}},
		{name: "window is [from, to)", share: 1, give: []time.Duration{0, 5 * time.Second, 10*time.Second - 1}, want: []bool{true, true, true}},
		{name: "half, evenly", share: 0.5, give: []time.Duration{1, 2, 3, 4, 5, 6}, want: []bool{false, true, false, true, false, true}},
		{name: "a third", share: 1.0 / 3, give: []time.Duration{1, 2, 3, 4, 5, 6}, want: []bool{false, false, true, false, false, true}},
		// Calls outside the window do not advance the spread.
		{name: "half, with calls outside", share: 0.5, give: []time.Duration{-1, 1, -1, 2}, want: []bool{false, false, false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &incident{fault: faultFail, share: tt.share}
			in.schedule(t0, t0.Add(10*time.Second))
			for i, d := range tt.give {
				if got := in.hitsAt(t0.Add(d)); got != tt.want[i] {
					t.Errorf("hitsAt(t0%+v) (call %d) = %v, want %v", d, i, got, tt.want[i])
				}
			}
		})
	}
	var unscheduled incident
	unscheduled.share = 1
	if unscheduled.hitsAt(t0) {
		t.Errorf("hitsAt(t0) on an unscheduled incident = true, want false")
	}
}

// TestFrontAnswers calls a front over gRPC with its downstream healthy,
// failing, hanging, and behind an open client breaker, and checks the
// front's status code and what it counted.
func TestFrontAnswers(t *testing.T) {
	type counts struct{ succeeded, refused, timedOut, failed, received uint64 }
	tests := []struct {
		name        string
		fault       string // "": healthy
		openBreaker bool   // after one healthy call, force the breaker open
		wantCode    codes.Code
		wantMsg     string
		want        counts // counted by the call under test
	}{
		{name: "healthy", wantCode: codes.OK, want: counts{succeeded: 1, received: 1}},
		{name: "failing", fault: faultFail, wantCode: codes.Unavailable, wantMsg: "warehouse failed: Unavailable", want: counts{failed: 1, received: 1}},
		{name: "hanging", fault: faultSlow, wantCode: codes.Unavailable, wantMsg: "warehouse did not answer within 50ms", want: counts{timedOut: 1, received: 1}},
		{name: "breaker open", openBreaker: true, wantCode: codes.Unavailable, wantMsg: "circuit breaker open", want: counts{refused: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inc := &incident{fault: tt.fault, slowness: time.Minute, share: 1}
			if tt.fault != "" {
				now := time.Now()
				inc.schedule(now.Add(-time.Hour), now.Add(time.Hour))
			}
			ds, err := startDownstream(inc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ds.stop) // after the front, which startGuardedFront stops
			cfg := config{deadline: 50 * time.Millisecond, breakerWait: time.Minute, throttleWin: time.Minute}
			fs, guard, openings := startGuardedFront(t, ds, &cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cl, err := target.Dial(ctx, fs.addr, 1, 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()

			var base counts
			if tt.openBreaker {
				// The pair's breaker exists once the pair has made a call.
				if _, err := cl.Client().Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "SKU-0001", Quantity: 1, OrderId: "o-0"}); err != nil {
					t.Fatal(err)
				}
				b := guard.Breaker(ds.addr, "/corecart.inventory.v1.InventoryService/Allocate")
				if b == nil {
					t.Fatalf("guard.Breaker(%s, Allocate) = nil after a call", ds.addr)
				}
				b.ForceOpen()
				base = counts{succeeded: 1, received: 1}
			}
			_, err = cl.Client().Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "SKU-0001", Quantity: 1, OrderId: "o-1"})
			if got := status.Code(err); got != tt.wantCode || !strings.Contains(status.Convert(err).Message(), tt.wantMsg) {
				t.Errorf("front Allocate error = %v, want code %v with %q", err, tt.wantCode, tt.wantMsg)
			}
			got := counts{fs.succeeded.Load(), fs.refused.Load(), fs.timedOut.Load(), fs.failed.Load(), ds.received.Load()}
			want := counts{base.succeeded + tt.want.succeeded, tt.want.refused, tt.want.timedOut, tt.want.failed, base.received + tt.want.received}
			if got != want {
				t.Errorf("counts after the call = %+v, want %+v", got, want)
			}
			if n := openings.Load(); n != 0 {
				t.Errorf("breaker openings = %d, want 0 (a forced opening is not a trip)", n)
			}
		})
	}
}

// TestDependencyDemoEndToEnd runs the dependency scenario, short, and
// checks its shape: during the incident the protected front fails fast
// and its downstream receives far fewer calls than the unprotected
// front's; after the incident the protected front serves again.
func TestDependencyDemoEndToEnd(t *testing.T) {
	var stdout, stderr scenariotest.Buffer
	env := scenario.Env{Stderr: &stderr, ReadyTimeout: 3 * time.Second}
	out := filepath.Join(t.TempDir(), "dependency.html")
	const downstreamDeadline = 200 * time.Millisecond
	// As `levee demo -scenario dependency -capacity 400 -cpu-work 200us
	// -normal 300ms -recovery 1s -deadline 1s -quiet` would set them (with
	// the flags' defaults: normal load 0.5, Poisson arrivals, no retries).
	s := scenario.Settings{
		Capacity: 400, CPUWork: 200 * time.Microsecond,
		Normal: 300 * time.Millisecond, Recovery: time.Second, NormalLoad: 0.5,
		Load: scenario.Load{
			Options:  []loadgen.Option{loadgen.WithDeadline(time.Second), loadgen.WithArrivals(loadgen.Poisson), loadgen.WithMaxInFlight(10000)},
			Arrivals: "poisson", Deadline: time.Second, Conns: 1, Quiet: true,
		},
		Drain: 300 * time.Millisecond,
	}
	cfg := defaultConfig()
	fs := flag.NewFlagSet("dependency", flag.ContinueOnError)
	cfg.register(fs)
	if err := fs.Parse([]string{"-incident", "1200ms", "-slowness", "600ms",
		"-downstream-deadline", downstreamDeadline.String(), "-breaker-wait", "300ms"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.check(); err != nil {
		t.Fatalf("check() error = %v", err)
	}
	cfg.sampleEvery = 100 * time.Millisecond
	res, err := run(context.Background(), env, s, cfg)
	if err != nil {
		t.Fatalf("run() error = %v; stderr:\n%s", err, stderr.String())
	}
	if err := scenario.Write(&stdout, &stderr, res, out, ""); err != nil {
		t.Fatalf("Write() error = %v", err)
	}

	runs := scenariotest.CheckRunsComplete(t, res.Comparison.Runs)
	un, pr := runs[0], runs[1]
	unInc, prInc := un.Result.Phases[1], pr.Result.Phases[1]
	t.Logf("incident: refusal p50 unprotected %v, protected %v; downstream calls unprotected %.0f, protected %.0f",
		unInc.Refusal.P50, prInc.Refusal.P50, phaseIncrease(t, un, measureReceived, 1), phaseIncrease(t, pr, measureReceived, 1))

	// Unprotected, every failure waited for the downstream deadline.
	if unInc.Refusal.Count == 0 || unInc.Refusal.P50 < downstreamDeadline*9/10 {
		t.Errorf("unprotected incident refusal p50 = %v over %d, want >= 90%% of the downstream deadline %v", unInc.Refusal.P50, unInc.Refusal.Count, downstreamDeadline)
	}
	// Protected, most failures are fast: the breaker refuses them
	// locally. (A few wait for the deadline: the calls sent before the
	// breaker opened and its half-open probes.)
	if prInc.Refusal.Count == 0 || prInc.Refusal.P50 > downstreamDeadline/4 {
		t.Errorf("protected incident refusal p50 = %v over %d, want <= %v", prInc.Refusal.P50, prInc.Refusal.Count, downstreamDeadline/4)
	}
	if fast, slow := phaseIncrease(t, pr, measureRefused, 1), phaseIncrease(t, pr, measureTimedOut, 1); !(fast > slow) {
		t.Errorf("protected incident: %v failed fast, %v timed out; want more fast failures", fast, slow)
	}
	if fast, split := phaseIncrease(t, pr, measureRefused, 1), phaseIncrease(t, pr, measureBreakerRef, 1)+phaseIncrease(t, pr, measureThrottled, 1); math.Abs(fast-split) > 2 {
		// (Up to a call or two apart: a sample may fall between a
		// guard's count and the front's.)
		t.Errorf("protected incident: %v failed fast, but breaker and throttle refused %v", fast, split)
	}
	if n := phaseIncrease(t, pr, measureBreakerOpen, 1); n < 1 {
		t.Errorf("protected incident: client breaker opened %v times, want >= 1", n)
	}
	// The sick downstream is spared. (The protected front still sends the
	// calls of the first downstream deadline of the incident, before its
	// breaker has seen enough failures, and then a few probes.)
	if unCalls, prCalls := phaseIncrease(t, un, measureReceived, 1), phaseIncrease(t, pr, measureReceived, 1); !(prCalls < unCalls/2) {
		t.Errorf("incident: downstream received %v calls from the protected front, %v from the unprotected; want under half", prCalls, unCalls)
	}
	// Calls pile up in the unprotected front.
	if unFlight, prFlight := phaseMean(t, un, measureFrontFlight, 1), phaseMean(t, pr, measureFrontFlight, 1); !(unFlight > 2*prFlight) {
		t.Errorf("incident: mean calls in flight unprotected %.1f, protected %.1f; want more than twice as many unprotected", unFlight, prFlight)
	}
	// After the incident the protected front serves again: through the
	// recovery phase, and fully by its last second.
	if rec := pr.Result.Phases[2]; rec.Succeeded == 0 {
		t.Errorf("protected recovery: no call succeeded")
	}
	last := pr.Result.Seconds[len(pr.Result.Seconds)-1]
	if last.Offered == 0 || float64(last.Succeeded) < 0.8*float64(last.Offered) {
		t.Errorf("protected last second: %d of %d succeeded, want >= 80%%", last.Succeeded, last.Offered)
	}

	table := stdout.String()
	for _, want := range []string{`phase 2/3 "incident"`, `phase 3/3 "recovery"`, measureReceived, measureRefused, "client breaker openings", "wrote " + out} {
		if !strings.Contains(table, want) {
			t.Errorf("demo output lacks %q:\n%s", want, table)
		}
	}
	html, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("reading the HTML report: %v", err)
	}
	for _, want := range []string{"a failing dependency", "Downstream calls and calls in flight", "downstream calls received/s"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("HTML report lacks %q", want)
		}
	}
}

// measureOf returns run r's measure called name.
func measureOf(t *testing.T, r report.Run, name string) report.Measure {
	t.Helper()
	for _, m := range r.Measures {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("%s run has no measure %q", r.Name, name)
	return report.Measure{}
}

// phaseWindow returns phase i's (start, end] from the result's start.
func phaseWindow(r report.Run, i int) (time.Duration, time.Duration) {
	p := r.Result.Phases[i]
	return p.Offset, p.Offset + p.Duration
}

// phaseIncrease returns how much the count name grew over the sampling
// intervals that end in phase i.
func phaseIncrease(t *testing.T, r report.Run, name string, i int) float64 {
	t.Helper()
	m := measureOf(t, r, name)
	from, to := phaseWindow(r, i)
	var sum float64
	for j := 1; j < len(m.Samples); j++ {
		if s := m.Samples[j]; s.At > from && s.At <= to {
			sum += s.Value - m.Samples[j-1].Value
		}
	}
	return sum
}

// phaseMean returns the mean of the level name's samples in phase i.
func phaseMean(t *testing.T, r report.Run, name string, i int) float64 {
	t.Helper()
	m := measureOf(t, r, name)
	from, to := phaseWindow(r, i)
	var sum float64
	n := 0
	for _, s := range m.Samples {
		if s.At > from && s.At <= to {
			sum += s.Value
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

func TestDepReport(t *testing.T) {
	start := time.Unix(100, 0)
	samples := []depSample{
		{at: start, frontFinished: 1, received: 1},
		{at: start.Add(time.Second), frontFinished: 5, frontLate: 1, frontRefused: 2, frontInFlight: 3, received: 4, downstreamWasted: 2,
			breakerOpenings: 1, breakerRefused: 6, throttleDropped: 7, frontTimedOut: 8, frontFailed: 9, downstreamInFlight: 10},
	}
	server, ms := depReport(samples, start, true)
	if len(server) != 2 || server[1].At != time.Second || server[1].Calls != 5 || server[1].Wasted != 1 || !math.IsNaN(server[1].CPU) || !math.IsNaN(server[1].Scale) {
		t.Errorf("depReport() server samples = %+v, want 2 with the front's calls and late calls, CPU and scale unknown", server)
	}
	want := map[string]struct {
		level, tableOnly bool
		last             float64
	}{
		measureReceived:    {last: 4},
		measureRefused:     {last: 2},
		measureBreakerRef:  {tableOnly: true, last: 6},
		measureThrottled:   {tableOnly: true, last: 7},
		measureTimedOut:    {last: 8},
		measureFailed:      {last: 9},
		measureFrontFlight: {level: true, last: 3},
		measureDownFlight:  {level: true, last: 10},
		measureDownWasted:  {tableOnly: true, last: 2},
		measureBreakerOpen: {tableOnly: true, last: 1},
	}
	if len(ms) != len(want) {
		t.Fatalf("depReport() = %d measures, want %d", len(ms), len(want))
	}
	for _, m := range ms {
		w, ok := want[m.Name]
		if !ok || m.Level != w.level || m.TableOnly != w.tableOnly || len(m.Samples) != 2 || m.Samples[1].Value != w.last {
			t.Errorf("depReport() measure %q = level %v, table only %v, samples %v; want %v, %v, last %v", m.Name, m.Level, m.TableOnly, m.Samples, w.level, w.tableOnly, w.last)
		}
	}
	_, ms = depReport(samples, start, false)
	for _, m := range ms {
		if m.Name == measureBreakerOpen || m.Name == measureBreakerRef || m.Name == measureThrottled {
			t.Errorf("depReport(unguarded) has the client guard's measure %q", m.Name)
		}
	}
	if len(ms) != len(want)-3 {
		t.Errorf("depReport(unguarded) = %d measures, want %d", len(ms), len(want)-3)
	}
}

func TestClientGuardThrottleWindow(t *testing.T) {
	tests := []struct {
		name         string
		give         time.Duration
		wantThrottle bool
	}{
		{name: "window 0: no throttle", give: 0, wantThrottle: false},
		{name: "window 10s", give: 10 * time.Second, wantThrottle: true},
	}
	const method = "/corecart.inventory.v1.InventoryService/Allocate"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds, err := startDownstream(&incident{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ds.stop) // after the front, which startGuardedFront stops
			cfg := config{deadline: time.Second, breakerWait: time.Second, throttleWin: tt.give}
			fs, guard, _ := startGuardedFront(t, ds, &cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := fs.front.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "SKU-0001", Quantity: 1, OrderId: "o-1"}); err != nil {
				t.Fatal(err)
			}
			if got := guard.Throttle(ds.addr, method) != nil; got != tt.wantThrottle {
				t.Errorf("guard has a throttle = %v, want %v", got, tt.wantThrottle)
			}
			if guard.Breaker(ds.addr, method) == nil {
				t.Errorf("guard has no breaker after a call")
			}
		})
	}
}

// startGuardedFront starts a front whose calls to ds go through the
// client guard of cfg, stopped when the test ends; it returns the front,
// the guard and the guard's count of breaker openings.
func startGuardedFront(t *testing.T, ds *downstream, cfg *config) (*frontServer, *grpcguard.Client, *atomic.Uint64) {
	t.Helper()
	openings := new(atomic.Uint64)
	guard, err := cfg.clientGuard(openings, nil)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := startFront(ds.addr, cfg.deadline, 0, guard.DialOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fs.stop)
	return fs, guard, openings
}

func TestCloseLogFirstAfter(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var l closeLog
	if _, ok := l.firstAfter(t0); ok {
		t.Fatalf("empty closeLog.firstAfter(t0) found a closing, want none")
	}
	for _, d := range []time.Duration{time.Second, 3 * time.Second, 5 * time.Second} {
		l.add(t0.Add(d))
	}
	tests := []struct {
		name   string
		give   time.Duration
		want   time.Duration
		wantOK bool
	}{
		{name: "before all", give: 0, want: time.Second, wantOK: true},
		{name: "at one", give: 3 * time.Second, want: 3 * time.Second, wantOK: true},
		{name: "between", give: 4 * time.Second, want: 5 * time.Second, wantOK: true},
		{name: "after all", give: 6 * time.Second, wantOK: false},
	}
	for _, tt := range tests {
		got, ok := l.firstAfter(t0.Add(tt.give))
		if ok != tt.wantOK || ok && !got.Equal(t0.Add(tt.want)) {
			t.Errorf("%s: closeLog.firstAfter(t0+%v) = t0+%v, %v; want t0+%v, %v", tt.name, tt.give, got.Sub(t0), ok, tt.want, tt.wantOK)
		}
	}
}
