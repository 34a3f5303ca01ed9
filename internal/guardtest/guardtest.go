// Package guardtest holds the test doubles of levee's front-end tests: a
// guard whose decisions a test sets, one that admits everything, a
// cleartext HTTP/2 server and client, a response writer that discards;
// an engine of given rules (Engine) and a run limit taught a baseline
// (LearnBaseline).
package guardtest

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/runlimit"
)

// Engine returns an engine of rules (decide.New), failing tb if they are
// not valid.
func Engine(tb testing.TB, rules ...decide.Rule) *decide.Engine {
	tb.Helper()
	e, err := decide.New(rules)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// LearnBaseline runs n calls of method on l one at a time, each taking d,
// at explicit instants from now, so that l learns a baseline of d for
// method; it returns the instant after the last. It fails t if a call
// alone finds no turn free, or if the baseline learned is not within a
// tenth of d.
func LearnBaseline(t testing.TB, l *runlimit.Limiter, method string, now time.Time, d time.Duration, n int) time.Time {
	t.Helper()
	f := l.Flow(method)
	for range n {
		tk, ok := f.TryAcquire(now)
		if !ok {
			t.Fatal("no turn free for a call alone")
		}
		now = now.Add(d)
		tk.Done(now, false)
	}
	if base := l.Baseline(method); base < d-d/10 || base > d+d/10 {
		t.Fatalf("run limit's baseline of %q = %v after %d calls of %v alone, want about %v", method, base, n, d, d)
	}
	return now
}

// Forced is a guard whose decisions a test sets (Set): at admission, and
// at the handler's start (it is an admission.Starter). It records what
// it was asked. Its zero value admits every call. It is safe for
// concurrent use.
type Forced struct {
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at each event; see Wait
	atAdmit  admission.Decision
	atStart  admission.Decision
	admits   int
	starts   int
	finishes []admission.Outcome
	admitted []admission.Call // as Admit saw them
	calls    []admission.Call // as Start saw them
}

// Name returns "forced".
func (f *Forced) Name() string { return "forced" }

// Admit records c and answers the decision Set gave for admission.
func (f *Forced) Admit(c admission.Call) admission.Decision {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.admits++
	f.admitted = append(f.admitted, c)
	f.signal()
	return f.atAdmit
}

// Start records c and answers the decision Set gave for the start.
func (f *Forced) Start(c admission.Call, p admission.Permit) admission.Decision {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts++
	f.calls = append(f.calls, c)
	f.signal()
	d := f.atStart
	if !d.Refused {
		d.Permit = p
	}
	return d
}

// Finish records o.
func (f *Forced) Finish(_ admission.Call, _ admission.Permit, o admission.Outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finishes = append(f.finishes, o)
	f.signal()
}

// signal wakes the goroutines in Wait. Needs mu.
func (f *Forced) signal() {
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// Wait blocks until done, given the counts of Counts, holds, or ctx ends
// (then it returns false).
func (f *Forced) Wait(ctx context.Context, done func(admits, starts, finishes int) bool) bool {
	for {
		f.mu.Lock()
		if done(f.admits, f.starts, len(f.finishes)) {
			f.mu.Unlock()
			return true
		}
		if f.changed == nil {
			f.changed = make(chan struct{})
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// Set sets the decisions at admission and at the start.
func (f *Forced) Set(atAdmit, atStart admission.Decision) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.atAdmit, f.atStart = atAdmit, atStart
}

// Counts returns how many calls were admitted, started and finished.
func (f *Forced) Counts() (admits, starts, finishes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.admits, f.starts, len(f.finishes)
}

// Outcomes returns the outcomes calls were finished with.
func (f *Forced) Outcomes() []admission.Outcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]admission.Outcome(nil), f.finishes...)
}

// Admitted returns the calls as Admit saw them.
func (f *Forced) Admitted() []admission.Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]admission.Call(nil), f.admitted...)
}

// Started returns the calls as Start saw them.
func (f *Forced) Started() []admission.Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]admission.Call(nil), f.calls...)
}

// CheckKinds fails tb unless f admitted, and then started, calls of the
// kinds given, one "method kind" each in order: the kind "unknown"
// (admission.Call.StreamUnknown), "stream" or "unary".
func CheckKinds(tb testing.TB, f *Forced, admitted, started []string) {
	tb.Helper()
	if got := kinds(f.Admitted()); !slices.Equal(got, admitted) {
		tb.Errorf("admitted as %q, want %q", got, admitted)
	}
	if got := kinds(f.Started()); !slices.Equal(got, started) {
		tb.Errorf("started as %q, want %q", got, started)
	}
}

func kinds(calls []admission.Call) []string {
	k := make([]string, len(calls))
	for i, c := range calls {
		switch {
		case c.StreamUnknown:
			k[i] = c.Method + " unknown"
		case c.Stream:
			k[i] = c.Method + " stream"
		default:
			k[i] = c.Method + " unary"
		}
	}
	return k
}

// Pass is a guard that admits every call, at admission and at its start
// (it is an admission.Starter), and records nothing: for measuring what a
// front-end costs. Its zero value is ready to use.
type Pass struct{}

// Name returns "pass".
func (Pass) Name() string { return "pass" }

// Admit admits c.
func (Pass) Admit(admission.Call) admission.Decision { return admission.Decision{} }

// Start admits c.
func (Pass) Start(_ admission.Call, p admission.Permit) admission.Decision {
	return admission.Grant(p)
}

// Finish does nothing.
func (Pass) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// Observed records what an engine's Observer is told (Observer): every
// refusal, unsampled, and every move of a learned limit. Its zero value
// is ready to use; it is safe for concurrent use.
type Observed struct {
	mu       sync.Mutex
	refusals []decide.RefusalEvent
	changes  []decide.LimitChange
}

// Observer returns an Observer that records in o.
func (o *Observed) Observer() decide.Observer {
	return decide.Observer{
		RefusalsPerSecond: -1,
		OnRefusal: func(ev decide.RefusalEvent) {
			o.mu.Lock()
			o.refusals = append(o.refusals, ev)
			o.mu.Unlock()
		},
		OnLimitChange: func(c decide.LimitChange) {
			o.mu.Lock()
			o.changes = append(o.changes, c)
			o.mu.Unlock()
		},
	}
}

// Got returns what o recorded since the last Take (all of it, if none).
func (o *Observed) Got() ([]decide.RefusalEvent, []decide.LimitChange) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]decide.RefusalEvent(nil), o.refusals...), append([]decide.LimitChange(nil), o.changes...)
}

// Take returns what o recorded since the last Take, and forgets it.
func (o *Observed) Take() ([]decide.RefusalEvent, []decide.LimitChange) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, c := o.refusals, o.changes
	o.refusals, o.changes = nil, nil
	return r, c
}

// ServeH2C serves h over HTTP/1.1 and cleartext HTTP/2 (as connect-go
// servers are run) on a loopback port until the test ends, and returns
// its base URL.
func ServeH2C(tb testing.TB, h http.Handler) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	hs := &http.Server{Handler: h, Protocols: new(http.Protocols), ReadHeaderTimeout: time.Minute}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(lis)
	}()
	tb.Cleanup(func() {
		_ = hs.Close()
		<-done
	})
	return "http://" + lis.Addr().String()
}

// H2CTransport returns an HTTP transport that speaks cleartext HTTP/2
// only; its idle connections are closed when the test ends.
func H2CTransport(tb testing.TB) *http.Transport {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	tb.Cleanup(tr.CloseIdleConnections)
	return tr
}

// HTTP1Head sends sent, the start of an HTTP/1.1 request (its line,
// headers and as much of its body as the test sends), to the server at
// url ("http://host:port") on a connection of its own, and reads the
// response's head. It fails tb unless the head comes within 3s: a server
// that waits for the rest of the body never answers. The connection is
// closed before HTTP1Head returns.
func HTTP1Head(tb testing.TB, url string, sent []byte) *http.Response {
	tb.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	_, _ = conn.Write(sent)
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		tb.Fatalf("no answer within 3s of the request's start (the server waits for the rest of its body): %v", err)
	}
	res.Body.Close()
	return res
}

// DiscardWriter is an http.ResponseWriter that keeps the status and
// throws the body away, for benchmarks of handlers. Its zero value needs
// its header map set.
type DiscardWriter struct {
	H      http.Header
	Status int
}

// Header returns w.H.
func (w *DiscardWriter) Header() http.Header { return w.H }

// Write discards b.
func (w *DiscardWriter) Write(b []byte) (int, error) { return len(b), nil }

// WriteHeader keeps code.
func (w *DiscardWriter) WriteHeader(code int) { w.Status = code }

// CountingReader yields Left zero bytes and counts, in Sent, those read
// from it: an upload's body, to tell how much of it a client sent.
type CountingReader struct {
	Left int64
	Sent atomic.Int64
}

// Read reads zero bytes, at most Left in all.
func (r *CountingReader) Read(p []byte) (int, error) {
	if r.Left == 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.Left)
	clear(p[:n])
	r.Left -= n
	r.Sent.Add(n)
	return int(n), nil
}
