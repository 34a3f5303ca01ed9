package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/metrics"
	policyfile "github.com/levee-go/levee/policy"
	"github.com/levee-go/levee/throttle"
)

// The Grafana dashboard and the Prometheus alerting rules of deploy/.
const (
	dashboardFile = "../../deploy/grafana/levee.json"
	alertsFile    = "../../deploy/prometheus/levee-alerts.yml"
)

// notFromServe are the metrics deploy/ queries that `levee serve` does
// not export in this test, each with the reason. Each must still be
// exported by package metrics for the guard it describes: the test
// registers such guards on a metrics.Registry and checks it.
var notFromServe = map[string]string{
	"levee_breaker_state":                      "client side: a grpcguard Client's or AddBreaker's breakers; levee serve calls no downstream",
	"levee_breaker_rejected_total":             "client side",
	"levee_breaker_outcomes_total":             "client side",
	"levee_throttle_probability":               "client side: AddThrottle",
	"levee_client_decisions_total":             "client side: AddClient",
	"levee_cpu_cfs_periods_total":              "only where the CPU source is a cgroup with CFS counters",
	"levee_cpu_cfs_throttled_periods_total":    "only where the CPU source is a cgroup with CFS counters",
	"levee_cpu_pressure_stalled_seconds_total": "only where the kernel gives PSI",
}

// notYetOnMain are metrics deploy/ queries that no levee package exports
// yet. Only metrics under way on another branch belong here; remove an
// entry when its metric lands (the test then says so).
var notYetOnMain = map[string]string{}

// TestDeployQueriesExportedMetrics parses the dashboard and the alerting
// rules, extracts every metric and label matcher of their PromQL, and
// checks each against the /metrics of `levee serve` (the preset, and the
// static recipe for the bulkhead and load-shedding series) after
// calls that were admitted and refused.
func TestDeployQueriesExportedMetrics(t *testing.T) {
	exprs := dashboardExprs(t)
	alerts := alertExprs(t)
	if len(exprs) < 20 || len(alerts) < 5 {
		t.Fatalf("found %d dashboard queries and %d alert rules, want the whole dashboard and rule file", len(exprs), len(alerts))
	}
	exprs = append(exprs, alerts...)

	served := make(map[string]map[string]bool) // metric → its label names
	// The policy file's metrics (levee_policy_*) come with -policy.
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(policyfile.Example), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-capacity", "20", "-recipe", recipePreset},
		{"-capacity", "20", "-recipe", recipeStatic},
		{"-policy", policyFile},
	} {
		body := scrapeServe(t, args...)
		for name, labels := range exposition(t, body) {
			if served[name] == nil {
				served[name] = make(map[string]bool)
			}
			maps.Copy(served[name], labels)
		}
		if args[0] == "-policy" {
			continue
		}
		if !strings.Contains(body, `result="refused"`) || !regexp.MustCompile(`levee_decisions_total\{[^}]*result="refused"[^}]*\} [1-9]`).MatchString(body) {
			t.Errorf("levee serve %s: no refused decision after the spike; /metrics:\n%s", strings.Join(args, " "), body)
		}
	}
	elsewhere := exposition(t, clientSideScrape(t))

	used := make(map[string]bool)
	for _, e := range exprs {
		q := parsePromQL(e)
		if len(q.metrics) == 0 {
			t.Errorf("query %q: no metric found", e)
		}
		exprLabels := make(map[string]bool)
		pending := false
		for _, m := range q.metrics {
			used[m] = true
			labels, ok := served[m]
			switch {
			case ok:
			case notFromServe[m] != "":
				if labels, ok = elsewhere[m]; !ok {
					t.Errorf("query %q: %s is exported neither by levee serve nor by package metrics for %s", e, m, notFromServe[m])
				}
			case notYetOnMain[m] != "":
				pending = true
				continue
			default:
				t.Errorf("query %q: levee serve does not export %s", e, m)
				continue
			}
			for _, l := range q.labels[m] {
				if l != "job" && l != "instance" && !labels[l] {
					t.Errorf("query %q: %s has no label %q (labels: %v)", e, m, l, slices.Sorted(maps.Keys(labels)))
				}
			}
			maps.Copy(exprLabels, labels)
		}
		// A grouping label must be a label of one of the query's metrics
		// (not checked when one of them is not exported yet).
		for _, l := range q.grouping {
			if l != "job" && l != "instance" && !exprLabels[l] && !pending {
				t.Errorf("query %q: groups by %q, which none of its metrics has", e, l)
			}
		}
	}
	for m := range notFromServe {
		if !used[m] {
			t.Errorf("notFromServe lists %s, which nothing in deploy/ queries", m)
		}
	}
	for m := range notYetOnMain {
		if !used[m] {
			t.Errorf("notYetOnMain lists %s, which nothing in deploy/ queries", m)
		}
		if served[m] != nil || elsewhere[m] != nil {
			t.Errorf("%s is exported now: remove it from notYetOnMain", m)
		}
	}
}

// dashboardGroupings are the breakdowns an operator paged for refusals
// looks for first: each metric must have a dashboard query that groups it
// by the label (docs/why-refused.md starts from them).
var dashboardGroupings = []struct{ metric, label string }{
	{"levee_decisions_total", "guard"},
	{"levee_decisions_total", "result"},
	{"levee_refusals_total", "reason"},
	{"levee_refusals_total", "evidence"},
	{"levee_runlimit_refusals_total", "evidence"},
}

// counterRate matches what must come right before a counter in a
// dashboard query: a rate or an increase over a range (a counter's raw
// value says nothing on a graph).
var counterRate = regexp.MustCompile(`\b(rate|irate|increase)\(\s*$`)

// TestDashboardExplainsRefusals: the dashboard shows refusals by reason
// and by evidence of overload (levee_refusals_total) beside the decisions,
// and graphs every counter as a rate or an increase.
func TestDashboardExplainsRefusals(t *testing.T) {
	exprs := dashboardExprs(t)
	for _, want := range dashboardGroupings {
		found := false
		for _, e := range exprs {
			q := parsePromQL(e)
			if slices.Contains(q.metrics, want.metric) && slices.Contains(q.grouping, want.label) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no dashboard query groups %s by %s", want.metric, want.label)
		}
	}
	for _, e := range exprs {
		for _, m := range parsePromQL(e).metrics {
			if !strings.HasSuffix(m, "_total") || !strings.Contains(e, "(") { // a bare selector: a template variable's
				continue
			}
			for _, loc := range regexp.MustCompile(`\b`+regexp.QuoteMeta(m)+`\b`).FindAllStringIndex(e, -1) {
				if !counterRate.MatchString(e[:loc[0]]) {
					t.Errorf("query %q: counter %s not in rate(...) or increase(...)", e, m)
				}
			}
		}
	}
}

// scrapeServe runs `levee serve` with args in this process (a recipe
// with a capacity bound of 20 calls/s, say), drives a spike of 300
// calls/s at it with `levee load` for half a second (so that calls are
// admitted and refused and every labelled series exists), and returns its
// /metrics.
func scrapeServe(t *testing.T, args ...string) string {
	t.Helper()
	sc, serveOut, _ := testCLI(t)
	ctx, cancel := context.WithCancel(context.Background())
	serveDone := make(chan int, 1)
	go func() {
		serveDone <- sc.run(ctx, append([]string{"serve", "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0",
			"-cpu-work", "1ms"}, args...))
	}()
	defer func() {
		cancel()
		select {
		case <-serveDone:
		case <-time.After(shutdownGrace + 2*time.Second):
			t.Error("serve did not shut down")
		}
	}()
	grpcAddr, httpAddr := listening(t, serveOut, serveDone)
	lc, _, loadErr := testCLI(t)
	if code := lc.run(context.Background(), []string{"load", "-target", grpcAddr, "-stats", httpAddr,
		"-phases", "spike:500ms:300", "-deadline", "1s", "-capacity", "20", "-json", os.DevNull}); code != exitOK {
		t.Fatalf("levee load exited %d; stderr:\n%s", code, loadErr)
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s, %v", resp.Status, err)
	}
	return string(body)
}

// cgroupSource is a CPU source with cgroup throttling counters and PSI,
// which the machine running the test may lack.
type cgroupSource struct{}

func (cgroupSource) Sample() (cpu.Sample, error) {
	return cpu.Sample{Time: time.Now(), Allowance: 1, HasThrottling: true, HasPressure: true}, nil
}
func (cgroupSource) String() string { return "test cgroup" }

// clientSideScrape returns the exposition of a metrics.Registry holding
// what levee serve does not run here: a grpcguard Client with a breaker
// and a throttle, after one call, its breaker and throttle, and a CPU
// monitor whose source reports cgroup counters and PSI.
func clientSideScrape(t *testing.T) string {
	t.Helper()
	client, err := grpcguard.NewClient(
		grpcguard.WithBreaker(func(string, string) []breaker.Option { return nil }),
		grpcguard.WithThrottle(func(string, string) []throttle.Option { return nil }))
	if err != nil {
		t.Fatalf("grpcguard.NewClient: %v", err)
	}
	conn, err := grpc.NewClient("passthrough:///downstream:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const method = "/corecart.S/Get"
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	if err := client.UnaryClientInterceptor()(context.Background(), method, nil, nil, conn, ok); err != nil {
		t.Fatalf("a call through the client's interceptor: %v", err)
	}
	mon, err := cpu.NewMonitor(cgroupSource{}, cpu.WithInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	reg := metrics.New()
	for _, err := range []error{reg.AddClient(client), reg.AddBreaker("downstream", client.Breaker(conn.Target(), method)),
		reg.AddThrottle("downstream", client.Throttle(conn.Target(), method)), reg.AddCPU(mon)} {
		if err != nil {
			t.Fatalf("registering: %v", err)
		}
	}
	var buf bytes.Buffer
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			buf.WriteString(mf.GetName())
			buf.WriteByte('{')
			for i, l := range m.GetLabel() {
				if i > 0 {
					buf.WriteByte(',')
				}
				buf.WriteString(l.GetName() + `="` + l.GetValue() + `"`)
			}
			buf.WriteString("} 0\n")
		}
	}
	return buf.String()
}

// exposition parses a Prometheus text exposition into metric name → the
// names of its labels.
func exposition(t *testing.T, body string) map[string]map[string]bool {
	t.Helper()
	out := make(map[string]map[string]bool)
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	labelName := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			t.Fatalf("malformed exposition line %q", line)
		}
		name := line[:end]
		if out[name] == nil {
			out[name] = make(map[string]bool)
		}
		if line[end] == '{' {
			labels := line[end:strings.LastIndexByte(line, '}')]
			for _, m := range labelName.FindAllStringSubmatch(labels, -1) {
				out[name][m[1]] = true
			}
		}
	}
	return out
}

// dashboardExprs returns every PromQL query of the dashboard: the panels'
// targets and the template variables' queries. It checks on the way that
// the JSON parses, that panels have distinct ids, a title, a position and
// a Prometheus data source taken from the datasource variable.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			GridPos    struct{ H, W, X, Y int }
			Datasource struct{ Type, UID string }
			Targets    []struct {
				Expr       string `json:"expr"`
				RefID      string `json:"refId"`
				Datasource struct{ Type, UID string }
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s does not parse: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q, uid %q: want both", d.Title, d.UID)
	}
	var exprs []string
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			exprs = append(exprs, labelValuesQuery(t, v.Definition))
		}
	}
	ids := make(map[int]bool)
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" || p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %d: title %q, gridPos %+v: want a title and a place on the 24-column grid", p.ID, p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: data source %+v with %d queries, want prometheus from ${datasource}, and a query", p.Title, p.Datasource, len(p.Targets))
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" {
				t.Errorf("panel %q: a target without expr or refId", p.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	return exprs
}

// labelValuesQuery returns the series selector of a Grafana
// label_values(selector, label) definition.
func labelValuesQuery(t *testing.T, def string) string {
	t.Helper()
	inner, ok := strings.CutPrefix(def, "label_values(")
	i := strings.LastIndexByte(inner, ',')
	if !ok || i < 0 {
		t.Fatalf("template variable definition %q: want label_values(selector, label)", def)
	}
	return inner[:i]
}

// alertRules is the Prometheus rule file format.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// alertExprs parses the rule file strictly (unknown fields are errors)
// and returns its expressions, checking that every rule has a name, an
// expression, a severity, a summary and a valid for duration.
func alertExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("%s does not parse: %v", alertsFile, err)
	}
	var exprs []string
	names := make(map[string]bool)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || names[r.Alert] {
				t.Errorf("group %s: alert name %q empty or used twice", g.Name, r.Alert)
			}
			names[r.Alert] = true
			if r.Expr == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s: want an expr and a summary", r.Alert)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			exprs = append(exprs, r.Expr)
		}
	}
	return exprs
}

// promQuery is what parsePromQL finds in a query: its metric names, for
// each the label names its matchers use, and the labels of its by (...)
// and without (...) clauses.
type promQuery struct {
	metrics  []string
	labels   map[string][]string
	grouping []string
}

var (
	promString   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promSelector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	promWord     = regexp.MustCompile(`[a-zA-Z0-9_:.$]+`)
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"inf": true, "nan": true, "atan2": true}
)

// parsePromQL finds the metric names of a PromQL expression, and the
// label names each one's matchers use: what is neither a string, a range,
// a grouping clause, a function or operator, a keyword nor a number.
func parsePromQL(expr string) promQuery {
	q := promQuery{labels: make(map[string][]string)}
	s := promString.ReplaceAllString(expr, `""`)
	s = promRange.ReplaceAllString(s, "")
	for _, m := range promGrouping.FindAllStringSubmatch(s, -1) {
		if m[1] == "by" || m[1] == "without" {
			for _, l := range strings.Split(m[2], ",") {
				if l = strings.TrimSpace(l); l != "" && !slices.Contains(q.grouping, l) {
					q.grouping = append(q.grouping, l)
				}
			}
		}
	}
	s = promGrouping.ReplaceAllString(s, "")
	for _, m := range promSelector.FindAllStringSubmatch(s, -1) {
		for _, l := range promMatcher.FindAllStringSubmatch(m[2], -1) {
			if m[1] != "" {
				q.labels[m[1]] = append(q.labels[m[1]], l[1])
			}
		}
	}
	s = promSelector.ReplaceAllStringFunc(s, func(sel string) string {
		return sel[:strings.IndexByte(sel, '{')] + " "
	})
	seen := make(map[string]bool)
	for _, loc := range promWord.FindAllStringIndex(s, -1) {
		w := s[loc[0]:loc[1]]
		if c := w[0]; c >= '0' && c <= '9' || c == '.' || c == '$' || promKeywords[strings.ToLower(w)] {
			continue
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function or an aggregation
		}
		if !seen[w] {
			seen[w] = true
			q.metrics = append(q.metrics, w)
		}
	}
	return q
}

func TestParsePromQL(t *testing.T) {
	tests := []struct {
		give       string
		wantMetric []string
		wantLabels map[string][]string
		wantGroup  []string
	}{
		{
			give:       `sum by (rule, guard) (rate(levee_decisions_total{job=~"$job",result="refused"}[$__rate_interval]))`,
			wantMetric: []string{"levee_decisions_total"},
			wantLabels: map[string][]string{"levee_decisions_total": {"job", "result"}},
			wantGroup:  []string{"rule", "guard"},
		},
		{
			give:       "a_total / on(instance) group_left(x) (b + c{l!=\"}\"}) > bool 0.5 and d offset 5m",
			wantMetric: []string{"a_total", "b", "c", "d"},
			wantLabels: map[string][]string{"c": {"l"}},
		},
		{
			give:       `max by (name) (x{state=~"open|forced-open"}) == 1 unless absent(y) or 1e3 * z[5m:1m]`,
			wantMetric: []string{"x", "y", "z"},
			wantLabels: map[string][]string{"x": {"state"}},
			wantGroup:  []string{"name"},
		},
		{
			give:       `increase(levee_policy_reload_total{result="error"}[15m]) > 0`,
			wantMetric: []string{"levee_policy_reload_total"},
			wantLabels: map[string][]string{"levee_policy_reload_total": {"result"}},
		},
	}
	for _, tt := range tests {
		got := parsePromQL(tt.give)
		if !slices.Equal(got.metrics, tt.wantMetric) {
			t.Errorf("parsePromQL(%q) metrics = %v, want %v", tt.give, got.metrics, tt.wantMetric)
		}
		if !maps.EqualFunc(got.labels, tt.wantLabels, slices.Equal) {
			t.Errorf("parsePromQL(%q) labels = %v, want %v", tt.give, got.labels, tt.wantLabels)
		}
		if !slices.Equal(got.grouping, tt.wantGroup) {
			t.Errorf("parsePromQL(%q) grouping = %v, want %v", tt.give, got.grouping, tt.wantGroup)
		}
	}
}
