package httpguard

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/guardtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newGuard returns a Guard on an engine of one rule of g, keyed by
// x-tenant-id, with code.
func newGuard(t testing.TB, code decide.Code, g admission.Guard, opts ...Option) *Guard {
	t.Helper()
	e, err := decide.New([]decide.Rule{{
		Name:   "forced",
		Guards: []admission.Guard{g},
		Key:    decide.HeaderKey("x-tenant-id"),
		Code:   code,
	}})
	if err != nil {
		t.Fatal(err)
	}
	hg, err := New(e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	hg.clock.Fake = func() time.Time { return t0 } // refusals never sustained
	return hg
}

var refused = admission.RefuseFor(admission.CauseRateLimited, admission.EvidenceLimit, "rate limit exceeded", 1500*time.Millisecond)

func TestRefusals(t *testing.T) {
	tests := []struct {
		name        string
		code        decide.Code
		d           admission.Decision
		wantStatus  int
		wantAfter   string
		wantRetry   time.Duration
		wantSubject string
		wantReason  string
	}{
		{"rate", 0, refused, 429, "2", 1500 * time.Millisecond, "", "RATE_LIMITED"},
		{"unavailable", decide.Unavailable, admission.Decision{Refused: true, Reason: "cpu", RetryAfter: 20 * time.Millisecond, Cause: admission.CauseCPUOverloaded, Evidence: admission.EvidenceCPU}, 503, "1", 20 * time.Millisecond, "", "CPU_OVERLOADED"},
		{"per key", 0, admission.Decision{Refused: true, Reason: "per key", RetryAfter: time.Second, PerKey: true, Cause: admission.CausePerKeyLimited}, 429, "1", time.Second, "acme", "PER_KEY_LIMITED"},
		{"deadline", 0, admission.Decision{Refused: true, Reason: "deadline too short", RetryAfter: admission.Never, DeadlineTooShort: true}, 504, "", 0, "", "DEADLINE_TOO_SHORT"},
		{"no delay", 0, admission.Decision{Refused: true, Reason: "full"}, 429, "", 0, "", "OVERLOADED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fg := &guardtest.Forced{}
			fg.Set(tt.d, admission.Decision{})
			var runs atomic.Int64
			mux := http.NewServeMux()
			hg := newGuard(t, tt.code, fg)
			mux.Handle("POST /v1/items", hg.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs.Add(1) })))
			ts := httptest.NewServer(mux)
			defer ts.Close()
			req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/items", strings.NewReader("{}"))
			req.Header.Set("X-Tenant-Id", "acme")
			res, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tt.wantStatus || res.Header.Get("Retry-After") != tt.wantAfter {
				t.Errorf("status %d, Retry-After %q; want %d, %q", res.StatusCode, res.Header.Get("Retry-After"), tt.wantStatus, tt.wantAfter)
			}
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			var st spb.Status
			if err := protojson.Unmarshal(body, &st); err != nil {
				t.Fatalf("body %s is not a google.rpc.Status: %v", body, err)
			}
			if decide.Code(st.GetCode()).HTTPStatus() != tt.wantStatus || !strings.HasPrefix(st.GetMessage(), "levee: forced: ") {
				t.Errorf("body %s: code %d, message %q", body, st.GetCode(), st.GetMessage())
			}
			var retry time.Duration
			var subject, reason string
			for _, a := range st.GetDetails() {
				m, err := a.UnmarshalNew()
				if err != nil {
					t.Fatal(err)
				}
				switch m := m.(type) {
				case *errdetails.RetryInfo:
					retry = m.GetRetryDelay().AsDuration()
				case *errdetails.QuotaFailure:
					subject = m.GetViolations()[0].GetSubject()
				case *errdetails.ErrorInfo:
					if m.GetDomain() == decide.ErrorDomain && m.GetMetadata()["guard"] == "forced" {
						reason = m.GetReason()
					}
				}
			}
			if reason != tt.wantReason {
				t.Errorf("body %s: ErrorInfo reason %q (domain levee, guard forced), want %q", body, reason, tt.wantReason)
			}
			if retry != tt.wantRetry || subject != tt.wantSubject {
				t.Errorf("body %s: RetryInfo %v, QuotaFailure %q; want %v, %q", body, retry, subject, tt.wantRetry, tt.wantSubject)
			}
			if runs.Load() != 0 {
				t.Error("the handler ran on a refused request")
			}
			// Recorded with the engine: counted by guard, reason and
			// evidence (levee_refusals_total, the debug page).
			if c := hg.engine.RefusalCounts(); len(c) != 1 || c[0].Guard != "forced" || string(c[0].Reason) != tt.wantReason || c[0].Count != 1 {
				t.Errorf("engine's RefusalCounts() = %+v, want one %s refusal by forced", c, tt.wantReason)
			}
		})
	}
}

// The flow is the route pattern, or what WithFlow says; the outcome
// follows the status the handler answered.
func TestFlowsAndOutcomes(t *testing.T) {
	fg := &guardtest.Forced{}
	g := newGuard(t, 0, fg)
	mux := http.NewServeMux()
	status := func(code int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if code != 0 {
				w.WriteHeader(code)
			}
		})
	}
	mux.Handle("GET /ok", g.Middleware(status(0)))
	mux.Handle("GET /busy", g.Middleware(status(http.StatusServiceUnavailable)))
	mux.Handle("GET /broken", g.Middleware(status(http.StatusInternalServerError)))
	mux.Handle("GET /missing/{id}", g.Middleware(status(http.StatusNotFound)))
	mux.Handle("GET /stream", g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "event\n")
		w.(http.Flusher).Flush()
	})))
	named := newGuard(t, 0, fg, WithFlow(func(r *http.Request) string { return "/shop.v1.Cart/Add" }))
	mux.Handle("GET /named", named.Middleware(status(0)))
	ts := httptest.NewServer(mux)
	defer ts.Close()
	for _, p := range []string{"/ok", "/busy", "/broken", "/missing/7", "/stream", "/named"} {
		res, err := ts.Client().Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	outs := fg.Outcomes()
	calls := fg.Started()
	if len(outs) != 6 || len(calls) != 6 {
		t.Fatalf("%d finishes, %d starts; want 6 each", len(outs), len(calls))
	}
	wantFlows := []string{"GET /ok", "GET /busy", "GET /broken", "GET /missing/{id}", "GET /stream", "/shop.v1.Cart/Add"}
	for i, c := range calls {
		if c.Method != wantFlows[i] {
			t.Errorf("call %d: flow %q, want %q", i, c.Method, wantFlows[i])
		}
	}
	check := func(i int, wantErr, wantOverload bool) {
		t.Helper()
		if (outs[i].Err != nil) != wantErr || outs[i].Overload != wantOverload || outs[i].Skipped {
			t.Errorf("%s: outcome %+v; want error %v, overload %v", wantFlows[i], outs[i], wantErr, wantOverload)
		}
	}
	check(0, false, false)
	check(1, true, true)
	check(2, true, false)
	check(3, true, false)
	check(4, false, false)
	check(5, false, false)
}

// A refused upload with Expect: 100-continue costs no body bytes: the
// client never sends them, and the server never reads them.
func TestRefusedUploadReadsNoBody(t *testing.T) {
	fg := &guardtest.Forced{}
	fg.Set(refused, admission.Decision{})
	var read atomic.Int64
	h := newGuard(t, 0, fg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		read.Add(n)
	}))
	for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
		t.Run(proto, func(t *testing.T) {
			ts := httptest.NewUnstartedServer(h)
			tr := &http.Transport{ExpectContinueTimeout: time.Minute}
			if proto == "HTTP/2" {
				ts.EnableHTTP2 = true
				ts.StartTLS()
				tr = ts.Client().Transport.(*http.Transport).Clone()
				tr.ExpectContinueTimeout = time.Minute
				tr.ForceAttemptHTTP2 = true
			} else {
				ts.Start()
			}
			defer ts.Close()
			defer tr.CloseIdleConnections()
			body := &guardtest.CountingReader{Left: 32 << 20}
			req, _ := http.NewRequest(http.MethodPut, ts.URL+"/upload", body)
			req.ContentLength = 32 << 20
			req.Header.Set("Expect", "100-continue")
			res, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusTooManyRequests || res.ProtoMajor != int(proto[5]-'0') {
				t.Errorf("%s %d, want %s 429", res.Proto, res.StatusCode, proto)
			}
			if n := body.Sent.Load(); n != 0 {
				t.Errorf("the client sent %d body bytes of a refused upload, want 0", n)
			}
			if n := read.Load(); n != 0 {
				t.Errorf("the server read %d body bytes, want 0", n)
			}
		})
	}
}

// curl sees the refusal's status and Retry-After.
func TestCurlSeesRetryAfter(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl not found: install it (Debian: apt-get install -y curl)")
	}
	fg := &guardtest.Forced{}
	fg.Set(refused, admission.Decision{})
	ts := httptest.NewServer(newGuard(t, 0, fg).Middleware(http.NotFoundHandler()))
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, curl, "-s", "-o", "/dev/null", "-w", "%{http_code} %header{retry-after}", ts.URL+"/any").Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	if got := string(out); got != "429 2" {
		t.Errorf("curl -w '%%{http_code} %%header{retry-after}' = %q, want \"429 2\"", got)
	}
}

// A client that leaves in the middle of an upload ends the request with
// an error the handler sees, never a panic, and the call is finished.
func TestClientLeavesMidUpload(t *testing.T) {
	fg := &guardtest.Forced{}
	reading, readErr := make(chan struct{}), make(chan error, 1)
	ts := httptest.NewServer(newGuard(t, 0, fg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var first [1]byte
		_, err := io.ReadFull(r.Body, first[:])
		close(reading)
		if err == nil {
			_, err = io.Copy(io.Discard, r.Body)
		}
		readErr <- err
	})))
	defer ts.Close()
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(conn, "PUT /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
	_, _ = conn.Write(bytes.Repeat([]byte{'x'}, 1000))
	<-reading
	conn.Close()
	if err := <-readErr; err == nil {
		t.Error("the handler read a cut-off body without an error")
	}
	ts.Close() // waits for the handler to return
	if _, _, finishes := fg.Counts(); finishes != 1 {
		t.Errorf("%d finishes, want 1", finishes)
	}
}

// A handler that panics still gives back what the call holds.
func TestHandlerPanicFinishesTheCall(t *testing.T) {
	fg := &guardtest.Forced{}
	h := newGuard(t, 0, fg).Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	func() {
		defer func() {
			if r := recover(); r != http.ErrAbortHandler {
				t.Errorf("recovered %v, want the handler's panic", r)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	}()
	outs := fg.Outcomes()
	if len(outs) != 1 || !errors.Is(outs[0].Err, errHandlerPanicked) {
		t.Errorf("outcomes %+v, want one of a panicked handler", outs)
	}
}

// The admitted path allocates nothing beyond what the handler does.
func TestAdmittedPathAllocatesNothing(t *testing.T) {
	g := newGuard(t, 0, guardtest.Pass{})
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-Tenant-Id", "acme")
	req.Pattern = "GET /"
	w := &guardtest.DiscardWriter{H: http.Header{}}
	h.ServeHTTP(w, req) // warm the pools
	if allocs := testing.AllocsPerRun(100, func() { h.ServeHTTP(w, req) }); allocs != 0 {
		t.Errorf("the admitted path allocates %v times per request, want 0", allocs)
	}
}

// Engine returns the engine the Guard was made on: the one whose rules
// decide its calls, which counts its refusals.
func TestEngine(t *testing.T) {
	fg := &guardtest.Forced{}
	fg.Set(refused, admission.Decision{})
	e := guardtest.Engine(t, decide.Rule{Name: "forced", Guards: []admission.Guard{fg}})
	g, err := New(e)
	if err != nil {
		t.Fatal(err)
	}
	if g.Engine() != e {
		t.Fatalf("Engine() = %p, want the engine given to New, %p", g.Engine(), e)
	}
	w := httptest.NewRecorder()
	g.Middleware(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if c := g.Engine().RefusalCounts(); w.Code != http.StatusTooManyRequests || len(c) != 1 || c[0].Guard != "forced" || c[0].Count != 1 {
		t.Errorf("HTTP %d, Engine().RefusalCounts() = %+v; want 429 and one refusal by forced", w.Code, c)
	}
}
