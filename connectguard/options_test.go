package connectguard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/guardtest"
)

// countingCodec is connect-go's "proto" codec, counting what it
// marshals.
type countingCodec struct{ marshals atomic.Int64 }

func (*countingCodec) Name() string { return "proto" }

func (c *countingCodec) Marshal(m any) ([]byte, error) {
	c.marshals.Add(1)
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("countingCodec: %T is not a proto.Message", m)
	}
	return proto.Marshal(pm)
}

func (*countingCodec) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("countingCodec: %T is not a proto.Message", m)
	}
	return proto.Unmarshal(b, pm)
}

// refusingGuard returns a Guard with opts whose rule refuses every call
// in the middleware as rc does, never as a sustained overload.
func refusingGuard(t *testing.T, rc refusalCase, opts ...Option) *Guard {
	t.Helper()
	fg := &guardtest.Forced{}
	fg.Set(rc.d, admission.Decision{})
	g := newGuard(t, rc.code, fg, opts...)
	t0 := time.Now()
	g.clock.Fake = func() time.Time { return t0 }
	return g
}

// WithHandlerOptions gives the middleware's error writer the handlers'
// codec: the status of a gRPC or gRPC-Web refusal (its
// Grpc-Status-Details-Bin) is marshalled once by the "proto" codec of
// connect.WithCodec, and a connect-go client reads its code, details and
// metadata from it. Without the option the middleware marshals with
// connect-go's own codec, whatever the handlers have.
func TestWithHandlerOptionsCodec(t *testing.T) {
	rc := refusalCases[0]
	for _, given := range []bool{true, false} {
		t.Run(fmt.Sprintf("given=%v", given), func(t *testing.T) {
			codec := &countingCodec{}
			var opts []Option
			if given {
				opts = append(opts, WithHandlerOptions(connect.WithCodec(codec)))
			}
			g := refusingGuard(t, rc, opts...)
			var runs atomic.Int64
			url := serveH2C(t, g.Middleware(echoHandlers(&runs, connect.WithCodec(codec), connect.WithInterceptors(g.Interceptor()))))
			var want int64
			if given {
				want = 1
			}
			for _, p := range clientProtocols {
				if p.name == "connect" {
					continue // a Connect refusal is JSON: no codec
				}
				before := codec.marshals.Load()
				err := call(context.Background(), newRecorder(t), url, procUnary, p.opts...)
				checkRefusal(t, p.name, err, rc)
				if n := codec.marshals.Load() - before; n != want {
					t.Errorf("%s: the handlers' codec marshalled %d messages for the refusal, want %d", p.name, n, want)
				}
			}
			if n := runs.Load(); n != 0 {
				t.Errorf("%d handlers ran, want none", n)
			}
		})
	}
}

// connectJSONError is a Connect error as connect-go writes it in JSON.
type connectJSONError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details []struct {
		Type string `json:"type"`
	} `json:"details"`
}

// With the handlers' connect.WithRequireConnectProtocolHeader, a Connect
// unary request without the Connect-Protocol-Version header is no
// Connect call to connect-go: its handler answers it INVALID_ARGUMENT in
// unprefixed Connect JSON, and an error writer given the option does not
// classify it as a supported protocol. The middleware, given the option
// by WithHandlerOptions, refuses it in the form connect-go's error writer
// gives such a request, the handler's own: HTTP 429 with the refusal's
// code and details in a JSON body and Retry-After in the headers. A
// Connect streaming request without the header, which the option leaves
// alone, is refused as Connect streaming (HTTP 200 and an end-of-stream
// message), and a connect-go client, which sends the header, reads its
// refusal whole.
func TestWithHandlerOptionsRequireConnectProtocolHeader(t *testing.T) {
	rc := refusalCases[0]
	require := connect.WithRequireConnectProtocolHeader()
	post := func(url, proc, contentType string, body []byte) *http.Request {
		req, err := http.NewRequest(http.MethodPost, url+proc, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("X-Tenant-Id", "acme")
		return req
	}
	send := func(req *http.Request) (*http.Response, []byte) {
		t.Helper()
		res, err := newRecorder(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, body
	}
	unary := func(url string) *http.Request { return post(url, procUnary, "application/json", []byte(`"hi"`)) }

	// What connect-go makes of the request: no supported protocol, and
	// INVALID_ARGUMENT from the handler when the guard admits it.
	if req := unary("http://x"); connect.NewErrorWriter(require).IsSupported(req) || !connect.NewErrorWriter().IsSupported(req) {
		t.Fatal("connect-go's error writer classifies a request without Connect-Protocol-Version alike with and without the option")
	}
	admitting := newGuard(t, 0, &guardtest.Forced{}, WithHandlerOptions(require))
	var runs atomic.Int64
	url := serveH2C(t, admitting.Middleware(echoHandlers(&runs, require, connect.WithInterceptors(admitting.Interceptor()))))
	res, body := send(unary(url))
	var handlerErr connectJSONError
	if err := json.Unmarshal(body, &handlerErr); err != nil || res.StatusCode != http.StatusBadRequest ||
		res.Header.Get("Content-Type") != "application/json" || handlerErr.Code != "invalid_argument" {
		t.Fatalf("admitted: HTTP %d, Content-Type %q, body %s (%v); want connect-go's 400 invalid_argument in JSON",
			res.StatusCode, res.Header.Get("Content-Type"), body, err)
	}

	g := refusingGuard(t, rc, WithHandlerOptions(require))
	url = serveH2C(t, g.Middleware(echoHandlers(&runs, require, connect.WithInterceptors(g.Interceptor()))))
	res, body = send(unary(url))
	var refusal connectJSONError
	if err := json.Unmarshal(body, &refusal); err != nil {
		t.Fatalf("refused: body %s is not a Connect JSON error: %v", body, err)
	}
	if res.StatusCode != rc.wantHTTP || res.Header.Get("Content-Type") != "application/json" || res.Header.Get("Retry-After") != rc.wantAfter {
		t.Errorf("refused: HTTP %d, Content-Type %q, Retry-After %q; want %d, application/json, %q",
			res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("Retry-After"), rc.wantHTTP, rc.wantAfter)
	}
	var types []string
	for _, d := range refusal.Details {
		types = append(types, d.Type)
	}
	if refusal.Code != rc.wantCode.String() || !strings.Contains(strings.Join(types, " "), "google.rpc.RetryInfo") {
		t.Errorf("refused: code %q, details %q; want %q with a google.rpc.RetryInfo", refusal.Code, types, rc.wantCode)
	}

	// A stream's refusal: HTTP 200 and an end-of-stream message (flag 2).
	res, body = send(post(url, procClient, "application/connect+proto", []byte{0, 0, 0, 0, 0}))
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/connect+proto" ||
		len(body) < 5 || body[0]&2 == 0 || !bytes.Contains(body[5:], []byte(`"code":"`+rc.wantCode.String()+`"`)) {
		t.Errorf("refused stream: HTTP %d, Content-Type %q, body %q; want 200, application/connect+proto, an end-of-stream message of code %s",
			res.StatusCode, res.Header.Get("Content-Type"), body, rc.wantCode)
	}

	err := call(context.Background(), newRecorder(t), url, procUnary)
	checkRefusal(t, "connect-go client", err, rc)
	if n := runs.Load(); n != 0 {
		t.Errorf("%d handlers ran, want none", n)
	}
}
