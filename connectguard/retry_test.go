package connectguard

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/guardtest"
)

// A grpc-go client with a retry policy sends one attempt per refused
// call: connect-go answers a gRPC error with headers and then trailers,
// which commit the call for grpc-go (it retries only Trailers-Only
// answers), and once refusals are sustained the pushback says not to
// retry anyway.
func TestGRPCClientWithRetriesUnderSustainedOverload(t *testing.T) {
	fg := &guardtest.Forced{}
	fg.Set(admission.Decision{Refused: true, Reason: "too many calls waiting", RetryAfter: 5 * time.Millisecond}, admission.Decision{})
	g := newGuard(t, 0, fg)
	// Each refusal reads the clock once: a refusal every 20ms, without a
	// pause, is sustained after 25 of them.
	var ticks atomic.Int64
	base := time.Now()
	g.clock.Fake = func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * 20 * time.Millisecond) }
	var runs atomic.Int64
	url := serveH2C(t, g.Middleware(echoHandlers(&runs, connect.WithInterceptors(g.Interceptor()))))
	conn, err := grpc.NewClient(strings.TrimPrefix(url, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"methodConfig": [{"name": [{"service": "levee.test.v1.Echo"}], "retryPolicy": {
			"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s", "backoffMultiplier": 1,
			"retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var lastErr error
	calls := func(n int) (attempts int, pushback string) {
		before, _, _ := fg.Counts()
		for range n {
			var trailer metadata.MD
			err := conn.Invoke(context.Background(), procUnary, wrapperspb.String("hi"), new(msg), grpc.Trailer(&trailer))
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("call: %v, want RESOURCE_EXHAUSTED", err)
			}
			lastErr = err
			if v := trailer.Get("grpc-retry-pushback-ms"); len(v) > 0 {
				pushback = v[0]
			}
		}
		after, _, _ := fg.Counts()
		return after - before, pushback
	}
	if attempts, push := calls(5); attempts != 5 || push != "5" {
		t.Errorf("before refusals are sustained: %d attempts for 5 calls, pushback %q; want one attempt per call, 5", attempts, push)
	}
	calls(30) // long enough to be sustained
	if attempts, push := calls(20); attempts != 20 || push != "-1" {
		t.Errorf("sustained overload: %d attempts for 20 calls, last pushback %q; want one attempt per call, -1", attempts, push)
	}
	var reason string
	for _, d := range status.Convert(lastErr).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			reason = ei.GetReason() + " " + ei.GetMetadata()["cause"]
		}
	}
	if reason != "SUSTAINED_OVERLOAD OVERLOADED" {
		t.Errorf("sustained overload: ErrorInfo reason and cause %q, want SUSTAINED_OVERLOAD OVERLOADED", reason)
	}
	if runs.Load() != 0 {
		t.Errorf("%d handlers ran, want none", runs.Load())
	}
}
