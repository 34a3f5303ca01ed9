package connectguard

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/guardtest"
)

// Bad input gets a clear status from connect-go or the guard, never a
// panic, and every call the middleware admitted is finished.
func TestBadInput(t *testing.T) {
	fg := &guardtest.Forced{}
	g := newGuard(t, 0, fg)
	var runs atomic.Int64
	url := serveH2C(t, g.Middleware(echoHandlers(&runs, connect.WithInterceptors(g.Interceptor()))))
	body, _ := proto.Marshal(wrapperspb.String("hi"))
	tests := []struct {
		name       string
		method     string
		path       string
		header     map[string]string
		wantStatus int
		wantGRPC   string // grpc-status, for gRPC requests
		wantAdmits int    // calls the middleware admitted
	}{
		{"connect malformed timeout", "POST", procUnary, map[string]string{"Content-Type": "application/proto", "Connect-Timeout-Ms": "soon"}, 400, "", 0},
		{"connect huge timeout", "POST", procUnary, map[string]string{"Content-Type": "application/proto", "Connect-Timeout-Ms": strings.Repeat("9", 4096)}, 400, "", 0},
		{"connect negative timeout", "POST", procUnary, map[string]string{"Content-Type": "application/proto", "Connect-Timeout-Ms": "-5"}, 400, "", 0},
		{"grpc malformed timeout", "POST", procUnary, map[string]string{"Content-Type": "application/grpc", "Grpc-Timeout": "5x"}, 200, "3", 0},
		{"grpc huge timeout", "POST", procUnary, map[string]string{"Content-Type": "application/grpc", "Grpc-Timeout": "999999999S"}, 200, "3", 0},
		{"grpc unbounded timeout", "POST", procUnary, map[string]string{"Content-Type": "application/grpc", "Grpc-Timeout": "99999999H"}, 200, "0", 1},
		{"unknown procedure", "POST", "/levee.test.v1.Echo/Nope", map[string]string{"Content-Type": "application/proto"}, 404, "", 1},
		{"unknown service", "POST", "/nope.v1.Nope/Nope", map[string]string{"Content-Type": "application/proto"}, 404, "", 1},
		{"GET to a connect route", "GET", procUnary, nil, 405, "", 1},
		{"unsupported content type", "POST", procUnary, map[string]string{"Content-Type": "text/plain"}, 415, "", 1},
		{"bidi over HTTP/1.1", "POST", procBidi, map[string]string{"Content-Type": "application/connect+proto"}, 505, "", 1},
	}
	rec := newRecorder(t)
	h1 := &http.Client{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _, _ := fg.Counts()
			_, _, finBefore := fg.Counts()
			var b io.Reader
			if tt.method == "POST" {
				framed := body
				if strings.HasPrefix(tt.header["Content-Type"], "application/grpc") {
					framed = append([]byte{0, 0, 0, 0, byte(len(body))}, body...)
				}
				b = bytes.NewReader(framed)
			}
			req, _ := http.NewRequest(tt.method, url+tt.path, b)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			do := rec.Do
			if strings.Contains(tt.name, "HTTP/1.1") {
				do = h1.Do
			}
			res, err := do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != tt.wantStatus {
				t.Errorf("HTTP status %d, want %d", res.StatusCode, tt.wantStatus)
			}
			if tt.wantGRPC != "" {
				got := res.Trailer.Get("Grpc-Status")
				if got == "" {
					got = res.Header.Get("Grpc-Status")
				}
				if got != tt.wantGRPC {
					t.Errorf("grpc-status %q, want %q", got, tt.wantGRPC)
				}
			}
			after, _, fin := fg.Counts()
			if after-before != tt.wantAdmits || fin-finBefore != tt.wantAdmits {
				t.Errorf("the guard admitted %d calls and finished %d, want %d each", after-before, fin-finBefore, tt.wantAdmits)
			}
		})
	}
}

// The middleware reads the protocol's timeout header: the guards see the
// deadline connect-go will set.
func TestMiddlewareReadsTheDeadline(t *testing.T) {
	fg := &guardtest.Forced{}
	g := newGuard(t, 0, fg)
	t0 := time.Now()
	g.clock.Fake = func() time.Time { return t0 }
	var runs atomic.Int64
	url := serveH2C(t, g.Middleware(echoHandlers(&runs, connect.WithInterceptors(g.Interceptor()))))
	for _, p := range clientProtocols {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		err := call(ctx, newRecorder(t), url, procUnary, p.opts...)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	for i, c := range fg.Started() {
		// The client sends what is left of its hour, in a unit of its
		// protocol: within a second of t0 + 1h.
		if d := c.Deadline.Sub(t0); d < time.Hour-time.Second || d > time.Hour {
			t.Errorf("%s: the guard saw a deadline %v after the request, want about 1h", clientProtocols[i].name, d)
		}
	}
}

// A client that leaves in the middle of a unary upload (connect-go reads
// the whole body before the interceptor) leaves the guard's call
// finished, as abandoned.
func TestClientLeavesMidUpload(t *testing.T) {
	fg := &guardtest.Forced{}
	g := newGuard(t, 0, fg)
	var runs atomic.Int64
	url := serveH2C(t, g.Middleware(echoHandlers(&runs, connect.WithInterceptors(g.Interceptor()))))
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(conn, "POST "+procUnary+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/proto\r\nContent-Length: 1000000\r\n\r\n")
	_, _ = conn.Write(bytes.Repeat([]byte{'x'}, 1000))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !fg.Wait(ctx, func(admits, _, _ int) bool { return admits == 1 }) {
		t.Fatal("the server never admitted the upload")
	}
	conn.Close()
	if !fg.Wait(ctx, func(_, _, finishes int) bool { return finishes == 1 }) {
		t.Fatal("the call of a client that left was never finished")
	}
	if outs := fg.Outcomes(); !outs[0].Skipped || runs.Load() != 0 {
		t.Errorf("outcome %+v after %d handler runs; want skipped, none", outs[0], runs.Load())
	}
}

// A unary upload the middleware refuses costs no body bytes: with Expect:
// 100-continue the client never sends them.
func TestRefusedUploadSendsNoBody(t *testing.T) {
	fg := &guardtest.Forced{}
	fg.Set(admission.RefuseFor(admission.CauseRunQueueFull, admission.EvidenceStanding, "too many calls waiting", time.Second), admission.Decision{})
	g := newGuard(t, 0, fg)
	var runs atomic.Int64
	url := serveH2C(t, g.Middleware(echoHandlers(&runs, connect.WithInterceptors(g.Interceptor()))))
	tr := &http.Transport{ExpectContinueTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	body := &guardtest.CountingReader{Left: 32 << 20}
	req, _ := http.NewRequest(http.MethodPost, url+procUnary, body)
	req.ContentLength = 32 << 20
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set("Expect", "100-continue")
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" {
		t.Errorf("status %d, Retry-After %q; want 429, 1", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if n := body.Sent.Load(); n != 0 || runs.Load() != 0 {
		t.Errorf("the client sent %d body bytes and %d handlers ran; want 0, 0", n, runs.Load())
	}
}
