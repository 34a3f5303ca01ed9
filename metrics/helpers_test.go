package metrics

import (
	"bufio"
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/levee-go/levee/retrybudget"
)

// t0 is the fixed instant the tests drive their guards at: far in the past,
// so that a collector reading the wall clock where it should not would see
// every wait long over.
var t0 = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)

// newTestRegistry returns a Registry on a pedantic Prometheus registry,
// which also checks at every scrape that each collected metric was
// described, and whose clock is fixed at t0.
func newTestRegistry() *Registry {
	r := newRegistry(prometheus.NewPedanticRegistry())
	r.now = func() time.Time { return t0 }
	return r
}

// scrapeBody fetches /metrics through r's Handler and returns the body.
func scrapeBody(t *testing.T, r *Registry) string {
	t.Helper()
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading /metrics: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %s, want 200 OK; body:\n%s", resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("GET /metrics Content-Type = %q, want the Prometheus text format (text/plain; version=0.0.4)", ct)
	}
	return string(body)
}

// series parses a text exposition into series ("name{labels}") → value.
func series(t *testing.T, body string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("malformed exposition line %q", line)
		}
		out[line[:i]] = line[i+1:]
	}
	return out
}

// scrape fetches /metrics through r's Handler and returns its series.
func scrape(t *testing.T, r *Registry) map[string]string {
	t.Helper()
	return series(t, scrapeBody(t, r))
}

// checkSeries compares the series of got whose names start with any of
// prefixes with want, exactly: same set of series, same values.
func checkSeries(t *testing.T, got map[string]string, want map[string]string, prefixes ...string) {
	t.Helper()
	sel := make(map[string]string)
	for k, v := range got {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				sel[k] = v
				break
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := sel[k]; !ok {
			t.Errorf("scrape has no series %s, want %s", k, want[k])
		} else if g != want[k] {
			t.Errorf("scrape: %s = %s, want %s", k, g, want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		if _, ok := want[k]; !ok {
			t.Errorf("scrape has unexpected series %s = %s", k, sel[k])
		}
	}
}

// unaryInfo is the grpc.UnaryServerInfo of method.
func unaryInfo(method string) *grpc.UnaryServerInfo {
	return &grpc.UnaryServerInfo{FullMethod: method}
}

// okHandler is a unary handler that does nothing and succeeds.
func okHandler(context.Context, any) (any, error) { return "ok", nil }

func mustBudget(t testing.TB, opts ...retrybudget.Option) *retrybudget.Budget {
	t.Helper()
	b, err := retrybudget.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
