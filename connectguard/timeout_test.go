package connectguard

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"
)

func TestParseConnectTimeout(t *testing.T) {
	tests := []timeoutTest{
		{name: "absent", give: "", err: errNoTimeout},
		{name: "zero", give: "0", want: 0},
		{name: "one", give: "1", want: time.Millisecond},
		{name: "ten digits", give: "9999999999", want: 9999999999 * time.Millisecond},
		{name: "eleven digits", give: "10000000000", err: errBadTimeout},
		{name: "leading zeros within ten", give: "0000000005", want: 5 * time.Millisecond},
		{name: "plus sign", give: "+5", want: 5 * time.Millisecond},
		{name: "negative", give: "-5", err: errBadTimeout},
		{name: "minus zero", give: "-0", want: 0},
		{name: "unit", give: "5s", err: errBadTimeout},
		{name: "space", give: " 5", err: errBadTimeout},
		{name: "decimal", give: "1.5", err: errBadTimeout},
		{name: "huge", give: strings.Repeat("9", 4096), err: errBadTimeout},
		{name: "binary", give: "\x00\xff", err: errBadTimeout},
	}
	runTimeoutTests(t, "parseConnectTimeout", parseConnectTimeout, tests)
}

func TestParseGRPCTimeout(t *testing.T) {
	tests := []timeoutTest{
		{name: "absent", give: "", err: errNoTimeout},
		{name: "hours", give: "2H", want: 2 * time.Hour},
		{name: "minutes", give: "3M", want: 3 * time.Minute},
		{name: "seconds", give: "4S", want: 4 * time.Second},
		{name: "millis", give: "5m", want: 5 * time.Millisecond},
		{name: "micros", give: "6u", want: 6 * time.Microsecond},
		{name: "nanos", give: "7n", want: 7 * time.Nanosecond},
		{name: "zero", give: "0n", want: 0},
		{name: "eight digits", give: "99999999S", want: 99999999 * time.Second},
		{name: "nine digits", give: "100000000S", err: errBadTimeout},
		{name: "leading zeros", give: "0000000005S", want: 5 * time.Second},
		{name: "hours beyond a Duration", give: "99999999H", err: errNoTimeout},
		{name: "most hours a Duration holds", give: "2562047H", want: 2562047 * time.Hour},
		{name: "unit only", give: "S", err: errBadTimeout},
		{name: "no unit", give: "5", err: errBadTimeout},
		{name: "lower-case hour", give: "5h", err: errBadTimeout},
		{name: "negative", give: "-5S", err: errBadTimeout},
		{name: "plus sign", give: "+5S", want: 5 * time.Second},
		{name: "space", give: "5 S", err: errBadTimeout},
		{name: "huge", give: strings.Repeat("9", 4096) + "S", err: errBadTimeout},
		{name: "binary", give: "\x00\xffS", err: errBadTimeout},
	}
	runTimeoutTests(t, "parseGRPCTimeout", parseGRPCTimeout, tests)
}

type timeoutTest = struct {
	name string
	give string
	want time.Duration
	err  error
}

func runTimeoutTests(t *testing.T, name string, parse func(string) (time.Duration, error), tests []timeoutTest) {
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parse(tt.give)
			if !errors.Is(err, tt.err) || (tt.err == nil && got != tt.want) {
				t.Errorf("%s(%q) = %v, %v; want %v, %v", name, tt.give, got, err, tt.want, tt.err)
			}
		})
	}
}

func TestProtocolOf(t *testing.T) {
	tests := []struct {
		give string
		want protocol
	}{
		{"application/grpc", protoGRPC},
		{"application/grpc+proto", protoGRPC},
		{"Application/GRPC+json", protoGRPC},
		{"application/grpc-web", protoGRPCWeb},
		{"application/grpc-web+proto", protoGRPCWeb},
		{"application/grpc-web-text", protoConnect},
		{"application/grpcx", protoConnect},
		{"application/proto", protoConnect},
		{"application/connect+proto", protoConnect},
		{"application/json; charset=utf-8", protoConnect},
		{"", protoConnect},
	}
	for _, tt := range tests {
		if got := protocolOf(tt.give); got != tt.want {
			t.Errorf("protocolOf(%q) = %d, want %d", tt.give, got, tt.want)
		}
	}
}

// errGate stops a call at connect-go's request gate, which runs after the
// handler has read the call's timeout and before it reads the body.
var errGate = connect.NewError(connect.CodeAborted, errors.New("gate"))

// timeoutOracle asks a real connect-go handler how it reads a timeout
// header: a request gate sees the deadline the handler set.
type timeoutOracle struct {
	h        http.Handler
	deadline time.Time
	has      bool
	reached  bool
}

func newTimeoutOracle() *timeoutOracle {
	o := &timeoutOracle{}
	o.h = connect.NewUnaryHandler("/levee.test.v1.Oracle/Call",
		func(context.Context, *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			return connect.NewResponse(&emptypb.Empty{}), nil
		},
		connect.WithRequestGate(func(ctx context.Context, _ connect.Spec, _ connect.Peer, _ http.Header) (context.Context, error) {
			o.reached = true
			o.deadline, o.has = ctx.Deadline()
			return nil, errGate
		}))
	return o
}

// ask serves a request of protocol p whose timeout header is v, and
// reports whether connect-go accepted the header, the deadline it set
// (if any), and the instants around the call.
func (o *timeoutOracle) ask(p protocol, v string) (accepted, has bool, deadline, before, after time.Time) {
	req := httptest.NewRequest(http.MethodPost, "/levee.test.v1.Oracle/Call", strings.NewReader(""))
	switch p {
	case protoGRPC:
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set(GRPCTimeoutHeader, v)
	case protoGRPCWeb:
		req.Header.Set("Content-Type", "application/grpc-web")
		req.Header.Set(GRPCTimeoutHeader, v)
	default:
		req.Header.Set("Content-Type", "application/proto")
		req.Header.Set(ConnectTimeoutHeader, v)
	}
	o.reached, o.has = false, false
	before = time.Now()
	o.h.ServeHTTP(httptest.NewRecorder(), req)
	after = time.Now()
	return o.reached, o.has, o.deadline, before, after
}

// checkAgainstConnect compares the parser of protocol p with connect-go's
// handler on header value v.
func checkAgainstConnect(t *testing.T, o *timeoutOracle, p protocol, v string) {
	t.Helper()
	parse := parseConnectTimeout
	if p != protoConnect {
		parse = parseGRPCTimeout
	}
	d, err := parse(v)
	accepted, has, deadline, before, after := o.ask(p, v)
	switch {
	case errors.Is(err, errBadTimeout):
		if accepted {
			t.Fatalf("protocol %d, header %q: parser says malformed, connect-go accepted it (deadline %v)", p, v, has)
		}
	case !accepted:
		t.Fatalf("protocol %d, header %q: parser says %v, %v; connect-go refused it", p, v, d, err)
	case errors.Is(err, errNoTimeout):
		if has {
			t.Fatalf("protocol %d, header %q: parser says no deadline, connect-go set one %v after the call", p, v, deadline.Sub(before))
		}
	case !has:
		t.Fatalf("protocol %d, header %q: parser says %v, connect-go set no deadline", p, v, d)
	case deadline.Before(before.Add(d)) || deadline.After(after.Add(d)):
		t.Fatalf("protocol %d, header %q: parser says %v, connect-go's deadline is %v after the call's start (%v after its end)",
			p, v, d, deadline.Sub(before), deadline.Sub(after))
	}
}

// The middleware reads the timeout before connect-go does and must read
// it the same way: these fuzz targets compare the parsers with a real
// connect-go handler on the same header (connect-go does not export its
// parsers). Seeds are in testdata/fuzz.
func FuzzConnectTimeoutMatchesConnectGo(f *testing.F) {
	for _, s := range []string{"", "0", "1", "+5", "-0", "-1", "9999999999", "10000000000", "0000000001", "1e3", " 1", "0x10"} {
		f.Add(s)
	}
	o := newTimeoutOracle()
	f.Fuzz(func(t *testing.T, v string) {
		checkAgainstConnect(t, o, protoConnect, v)
	})
}

func FuzzGRPCTimeoutMatchesConnectGo(f *testing.F) {
	for _, s := range []string{"", "1S", "0n", "99999999H", "2562047H", "2562048H", "100000000S", "+1m", "-0u", "5", "S", "1h", "00000000001M"} {
		f.Add(s)
	}
	o := newTimeoutOracle()
	f.Fuzz(func(t *testing.T, v string) {
		checkAgainstConnect(t, o, protoGRPC, v)
		checkAgainstConnect(t, o, protoGRPCWeb, v)
	})
}
