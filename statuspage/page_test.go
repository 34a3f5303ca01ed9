package statuspage

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/runlimit"
)

// saturated is a CPU signal that says saturated, measures no
// utilisation and tells no threshold: a run limit takes it as evidence
// at once.
type saturated struct{}

func (saturated) Utilization() float64 { return 0 }
func (saturated) Saturated() bool      { return true }

// cpuAt is a CPU monitor's reading.
type cpuAt struct{ u, th float64 }

func (c cpuAt) Utilization() float64 { return c.u }
func (c cpuAt) Threshold() float64   { return c.th }
func (c cpuAt) Saturated() bool      { return c.u >= c.th }

var t0 = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

// overloaded is an engine whose run limit refuses the calls of
// /s.S/Allocate on the CPU's evidence, with calls of tenant acme waiting,
// and the page of it.
type overloaded struct {
	e    *decide.Engine
	l    *runlimit.Limiter
	page *Page
}

func newOverloaded(t *testing.T) *overloaded {
	t.Helper()
	l, err := runlimit.New(runlimit.WithBounds(1, 1), runlimit.WithQueueTarget(time.Millisecond), runlimit.WithCPU(saturated{}))
	if err != nil {
		t.Fatal(err)
	}
	e, err := decide.New([]decide.Rule{{Name: "default", Tenant: decide.HeaderKey("x-tenant-id"), Guards: []admission.Guard{runlimit.NewGuard("run", l)}}})
	if err != nil {
		t.Fatal(err)
	}
	o := &overloaded{e: e, l: l, page: New(Sources{Engine: e, CPU: cpuAt{0.99, 0.8}})}
	o.page.now = func() time.Time { return t0.Add(time.Second) }
	e.SetObserver(o.page.Observer(decide.Observer{RefusalsPerSecond: -1}))
	return o
}

// refuse admits calls of the method for tenant until the run limit
// refuses one, and records the refusal as a front-end does, at t0; it
// gives back the permits of the calls admitted meanwhile when the test
// ends.
func (o *overloaded) refuse(t *testing.T, method, tenant string) decide.Refusal {
	t.Helper()
	r := o.e.Match(method)
	f := decide.Facts{Ctx: context.Background(), Method: method, Lookup: &decide.Snapshot{Headers: map[string]string{"x-tenant-id": tenant}}}
	// A service time of 1ms, so that the lane's queue has a size, then
	// the only turn held.
	now := time.Now()
	if tk, ok := o.l.Flow(method).TryAcquire(now); ok {
		tk.Done(now.Add(time.Millisecond), false)
	}
	if _, ok := o.l.Flow(method).TryAcquire(time.Now()); !ok && o.l.Running() == 0 {
		t.Fatal("no turn to hold")
	}
	for range 100 {
		var c admission.Call
		var ps admission.Permits
		r.Fill(f, time.Now(), &c)
		if i, d := r.Admit(&c, &ps); i >= 0 {
			rf := r.Refusal(i, d, c.Key)
			o.e.Refused(decide.RefusalEvent{Time: t0, Method: method, Class: c.Class, Tenant: c.Tenant, Refusal: rf})
			return rf
		}
		t.Cleanup(func() { r.Abandon(&c, &ps) })
	}
	t.Fatal("100 calls admitted to wait for a turn held, with the CPU saturated; want a refusal")
	return decide.Refusal{}
}

func get(t *testing.T, h http.Handler, target string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec.Result(), rec.Body.String()
}

// TestPageJSON: under a refusal forced on the CPU's evidence, the JSON
// form names the refusal's reason, evidence, method, class and tenant,
// counts it, shows the flow's waiting lane, and the signals with the run
// limit's cpu as evidence.
func TestPageJSON(t *testing.T) {
	o := newOverloaded(t)
	rf := o.refuse(t, "/s.S/Allocate", "acme")
	if rf.Reason != decide.ReasonRunQueueFull || rf.Evidence != admission.EvidenceCPU {
		t.Fatalf("forced refusal %+v, want RUN_QUEUE_FULL on cpu", rf)
	}
	resp, body := get(t, o.page, "/debug/levee?format=json")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET ?format=json: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("page JSON: %v\n%s", err, body)
	}
	if !st.Time.Equal(t0.Add(time.Second)) {
		t.Errorf("time %v, want the page's clock, t0+1s", st.Time)
	}
	want := Refusal{Time: t0, Method: "/s.S/Allocate", Class: "critical", Tenant: "acme", Guard: "run", Reason: "RUN_QUEUE_FULL",
		Evidence: "cpu", Value: 0, Threshold: 0, Code: "RESOURCE_EXHAUSTED", RetryAfterMS: 1}
	if len(st.Refusals) != 1 {
		t.Fatalf("refusals %+v, want the one forced", st.Refusals)
	}
	if got := st.Refusals[0]; got.Method != want.Method || got.Class != want.Class || got.Tenant != want.Tenant || got.Guard != want.Guard ||
		got.Reason != want.Reason || got.Evidence != want.Evidence || got.Code != want.Code || !got.Time.Equal(t0) {
		t.Errorf("refusal %+v, want %+v", got, want)
	}
	if len(st.RefusalCounts) != 1 || st.RefusalCounts[0] != (RefusalCount{"run", "RUN_QUEUE_FULL", "cpu", 1}) {
		t.Errorf("refusal counts %+v, want run RUN_QUEUE_FULL cpu 1", st.RefusalCounts)
	}
	if len(st.RunLimits) != 1 {
		t.Fatalf("run limits %+v, want the rule's", st.RunLimits)
	}
	rl := st.RunLimits[0]
	if rl.Guard != "run" || rl.Limit != 1 || rl.Running != 1 {
		t.Errorf("run limit %+v, want run at limit 1 with its turn held", rl)
	}
	var flow *Flow
	for i := range rl.Flows {
		if rl.Flows[i].Name == "/s.S/Allocate" {
			flow = &rl.Flows[i]
		}
	}
	if flow == nil || flow.Waiting == 0 || len(flow.Lanes) != 1 || flow.Lanes[0].Tenant != "acme" || flow.Lanes[0].Class != "critical" ||
		flow.Lanes[0].Waiting != flow.Waiting || flow.QueueTargetMS != 1 {
		t.Errorf("flows %+v, want /s.S/Allocate with acme's critical lane waiting and a 1ms queue target", rl.Flows)
	}
	sig := map[string]Signal{}
	for _, s := range st.Signals {
		sig[s.Source+"/"+s.Name] = s
	}
	if s := sig["run/cpu"]; !s.Evidence || s.Value != 1 || s.Threshold != 1 {
		t.Errorf("signal run/cpu %+v, want evidence (saturated)", s)
	}
	if s := sig["cpu/saturated"]; !s.Evidence || s.Value != 0.99 || s.Threshold != 0.8 {
		t.Errorf("signal cpu/saturated %+v, want 0.99 against 0.8, evidence", s)
	}
	for _, name := range []string{"run/overrun", "run/standing", "run/spike"} {
		if _, ok := sig[name]; !ok {
			t.Errorf("no signal %s in %+v", name, st.Signals)
		}
	}
}

// TestPageText: the text form says the same for a person, and quotes
// what a client chose.
func TestPageText(t *testing.T) {
	o := newOverloaded(t)
	o.refuse(t, "/s.S/Allocate", "acme")
	o.e.Refused(decide.RefusalEvent{Time: t0.Add(time.Millisecond), Method: "/s.S/\x00evil\nline", Tenant: "\xff\xfe",
		Refusal: decide.Refusal{Code: decide.ResourceExhausted, Guard: "run", Reason: decide.ReasonSustainedOverload, Cause: decide.ReasonRunQueueFull, Evidence: admission.EvidenceSpike}})
	resp, body := get(t, o.page, "/debug/levee")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		"levee status at 2026-12-04T10:00:01Z",
		"run limit run: limit 1 (bounds 1-1), running 1",
		"/s.S/Allocate",
		"lane tenant=acme class=critical",
		"signals of overload:",
		"RUN_QUEUE_FULL",
		"SUSTAINED_OVERLOAD (cause RUN_QUEUE_FULL)",
		`method="/s.S/\x00evil\nline"`,
		`tenant="\xff\xfe"`,
		"10:00:00.000",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page text has no %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "evil\nline") || !utf8.ValidString(body) {
		t.Errorf("page text carries a client's raw bytes:\n%q", body)
	}
	lines := strings.Split(body, "\n")
	var cpuLine string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) == 6 && f[0] == "run" && f[1] == "cpu" {
			cpuLine = l
		}
	}
	if f := strings.Fields(cpuLine); len(f) != 6 || f[5] != "yes" {
		t.Errorf("signal line of the run limit's cpu %q, want it marked evidence (yes)", cpuLine)
	}
	if resp, _ := get(t, o.page, "/debug/levee?format=xml"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("?format=xml: %d, want 400", resp.StatusCode)
	}
}

// TestPageBounded: the page keeps the last MaxRefusals refusals, newest
// first, and cuts long names.
func TestPageBounded(t *testing.T) {
	p := New(Sources{})
	long := strings.Repeat("m", 10000)
	for i := range 100 {
		p.Record(decide.RefusalEvent{Time: t0.Add(time.Duration(i) * time.Millisecond), Method: long, Tenant: long,
			Refusal: decide.Refusal{Guard: "rate", Reason: decide.ReasonRateLimited, RetryAfter: admission.Never}})
	}
	st := p.Status()
	if len(st.Refusals) != MaxRefusals || !st.Refusals[0].Time.Equal(t0.Add(99*time.Millisecond)) || !st.Refusals[MaxRefusals-1].Time.Equal(t0.Add(68*time.Millisecond)) {
		t.Fatalf("%d refusals, newest %v, oldest %v; want %d, t0+99ms to t0+68ms", len(st.Refusals), st.Refusals[0].Time, st.Refusals[len(st.Refusals)-1].Time, MaxRefusals)
	}
	if r := st.Refusals[0]; len(r.Method) != MaxNameLen || len(r.Tenant) != MaxNameLen || r.RetryAfterMS != -1 {
		t.Errorf("refusal with 10000-byte names: method %d bytes, tenant %d, retry %v; want %d, %d, -1", len(r.Method), len(r.Tenant), r.RetryAfterMS, MaxNameLen, MaxNameLen)
	}
	if n := testing.AllocsPerRun(100, func() {
		p.Record(decide.RefusalEvent{Time: t0, Method: "/s/M", Refusal: decide.Refusal{Guard: "rate"}})
	}); n != 0 {
		t.Errorf("Record: %v allocations, want 0", n)
	}
}

// The zero Page is usable, as its doc says: it shows no sources and
// serves its page (it read a nil clock before).
func TestZeroPage(t *testing.T) {
	var p Page
	st := p.Status()
	if st.Time.IsZero() || len(st.RunLimits) != 0 || len(st.Signals) != 0 || len(st.Refusals) != 0 {
		t.Errorf("zero Page's Status = %+v, want a time and nothing else", st)
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/?format=json", nil))
	if rec.Code != 200 {
		t.Errorf("zero Page served %d, want 200", rec.Code)
	}
}
