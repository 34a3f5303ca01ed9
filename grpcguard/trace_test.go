package grpcguard

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/ratelimit"
)

// spanHandler is a stats.Handler that starts a span per call, as
// OpenTelemetry's otelgrpc server handler does, and ends it with the call.
type spanHandler struct{ tracer trace.Tracer }

func (h spanHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	ctx, _ = h.tracer.Start(ctx, info.FullMethodName, trace.WithSpanKind(trace.SpanKindServer))
	return ctx
}

func (h spanHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.End); ok {
		trace.SpanFromContext(ctx).End()
	}
}

func (spanHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (spanHandler) HandleConn(context.Context, stats.ConnStats)                       {}

// newRecorder returns a span recorder and a tracer whose spans it records.
func newRecorder(t *testing.T) (*tracetest.SpanRecorder, trace.Tracer) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return sr, tp.Tracer("grpcguard-test")
}

// refusalEvents returns the attributes of every RefusalEvent of span.
func refusalEvents(span sdktrace.ReadOnlySpan) []map[attribute.Key]attribute.Value {
	var out []map[attribute.Key]attribute.Value
	for _, e := range span.Events() {
		if e.Name != RefusalEvent {
			continue
		}
		m := make(map[attribute.Key]attribute.Value)
		for _, kv := range e.Attributes {
			m[kv.Key] = kv.Value
		}
		out = append(out, m)
	}
	return out
}

// oneToken returns a rule over every method whose only guard, "rate", is a
// bucket of one token refilled once a second.
func oneToken(t testing.TB) []decide.Rule {
	return []decide.Rule{{Name: "all", Guards: []admission.Guard{ratelimit.NewGuard("rate", mustLimiter(t, 1, 1))}}}
}

// TestRefusalEventInterceptors serves through the interceptors only, with a
// stats handler that starts a span per call: the refused call's span has
// the RefusalEvent, with the guard, the reason and the retry delay; the
// admitted call's span has none.
func TestRefusalEventInterceptors(t *testing.T) {
	sr, tracer := newRecorder(t)
	s := mustServer(t, oneToken(t))
	env := startServer(t, &testService{}, false, append(interceptorsOnly(s), grpc.StatsHandler(spanHandler{tracer})))
	ctx := context.Background()
	if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Fatalf("first call: %v, want admitted", err)
	}
	_, err := env.client.EmptyCall(ctx, &testgrpc.Empty{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v, want RESOURCE_EXHAUSTED", err)
	}
	// A stream, refused when it opens.
	stream, err := env.client.FullDuplexCall(ctx)
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream: %v, want RESOURCE_EXHAUSTED", err)
	}

	// The spans end as the server's stats handler sees each call end,
	// which need not be the order the client saw: match them by name and
	// events. Of the two EmptyCall spans one (the admitted call's) has no
	// refusal event, the other one; the stream's span has one.
	spans := endedSpans(t, sr, 3)
	byName := map[string][]int{} // refusal events per span, by span name
	for _, span := range spans {
		byName[span.Name()] = append(byName[span.Name()], len(refusalEvents(span)))
	}
	if got := byName[emptyCall]; len(got) != 2 || min(got[0], got[1]) != 0 || max(got[0], got[1]) != 1 {
		t.Fatalf("%s spans' refusal events %v, want one span with none (admitted) and one with 1 (refused)", emptyCall, got)
	}
	if got := byName[duplexCall]; len(got) != 1 || got[0] != 1 {
		t.Fatalf("%s spans' refusal events %v, want one span with 1", duplexCall, got)
	}
	for _, span := range spans {
		ev := refusalEvents(span)
		if len(ev) == 0 {
			continue
		}
		name := span.Name()
		if g := ev[0][attrGuard].AsString(); g != "rate" {
			t.Errorf("%s: levee.guard = %q, want rate", name, g)
		}
		if r := ev[0][attrReason].AsString(); r != string(decide.ReasonRateLimited) {
			t.Errorf("%s: levee.reason = %q, want %s, the reason of its ErrorInfo and of the otelmetrics series", name, r, decide.ReasonRateLimited)
		}
		if m := ev[0][attrMessage].AsString(); m == "" {
			t.Errorf("%s: levee.message is empty", name)
		}
		if d := ev[0][attrRetryAfter].AsFloat64(); d <= 0 || d > 1 {
			t.Errorf("%s: levee.retry_after = %v s, want in (0, 1] for a bucket refilling once a second", name, d)
		}
	}
}

// TestNoRefusalEventInTap: a call the tap refuses never gets a stream, so
// no stats handler starts its span and there is nothing to add the event
// to (see RefusalEvent). The test pins that down: if grpc-go ever starts
// the span before the tap, it fails and the doc must change.
func TestNoRefusalEventInTap(t *testing.T) {
	sr, tracer := newRecorder(t)
	s := mustServer(t, oneToken(t))
	env := startServer(t, &testService{}, false, append(s.ServerOptions(), grpc.StatsHandler(spanHandler{tracer})))
	ctx := context.Background()
	if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Fatalf("first call: %v, want admitted", err)
	}
	if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v, want RESOURCE_EXHAUSTED", err)
	}
	env.conn.Close() // ends the connection, so every span that was started has ended
	for _, span := range sr.Ended() {
		if ev := refusalEvents(span); len(ev) != 0 {
			t.Errorf("span %q has refusal events %v; the tap has no span to add them to", span.Name(), ev)
		}
	}
	if n := len(sr.Started()); n != 1 {
		t.Errorf("%d spans started, want 1 (the admitted call's; the refused call had no stream)", n)
	}
}

// endedSpans waits until the recorder holds n ended spans (the server ends
// a span after the client has its answer) and returns them in order.
func endedSpans(t *testing.T, sr *tracetest.SpanRecorder, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		spans := sr.Ended()
		if len(spans) >= n {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans ended, want %d", len(spans), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRefusalEventAllocs: with no span recording, a refusal costs nothing
// more: traceRefusal allocates nothing, without a span or with one that is
// not recording (a sampled-out call), and the refused and admitted paths
// through the interceptor allocate as much with such a span as without.
func TestRefusalEventAllocs(t *testing.T) {
	notRecording := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1},
	}))
	if trace.SpanFromContext(notRecording).IsRecording() {
		t.Fatal("the test's span records")
	}
	d := admission.Refuse("rate limit exceeded", time.Second)
	for name, ctx := range map[string]context.Context{"no span": context.Background(), "span not recording": notRecording} {
		if got := testing.AllocsPerRun(1000, func() { traceRefusal(ctx, decide.NewRefusal(0, "rate", d, "")) }); got != 0 {
			t.Errorf("traceRefusal, %s: %v allocations, want 0", name, got)
		}
	}

	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	refusing := mustServer(t, []decide.Rule{{Guards: []admission.Guard{ratelimit.NewGuard("rate", mustLimiter(t, 0, 1))}}})
	if _, err := refusing.unary(context.Background(), nil, info, handler); err != nil {
		t.Fatalf("first call: %v, want admitted", err) // spends the only token
	}
	// A server call's context: outside one, grpc.SetTrailer fails with an
	// error that formats the whole context, span included.
	inCall := func(ctx context.Context) context.Context {
		return grpc.NewContextWithServerTransportStream(ctx, trailerStream{})
	}
	refused := func(ctx context.Context) float64 {
		ctx = inCall(ctx)
		return testing.AllocsPerRun(200, func() {
			if _, err := refusing.unary(ctx, nil, info, handler); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("call: %v, want RESOURCE_EXHAUSTED", err)
			}
		})
	}
	if without, with := refused(context.Background()), refused(notRecording); with != without {
		t.Errorf("refused call: %v allocations with a span not recording, %v without, want equal", with, without)
	}

	admitting, _ := chainServer(t)
	if got := testing.AllocsPerRun(1000, func() {
		if _, err := admitting.unary(notRecording, nil, info, handler); err != nil {
			t.Fatal(err)
		}
	}); got != 0 {
		t.Errorf("admitted call with a span not recording: %v allocations, want 0", got)
	}
}

// trailerStream is the grpc.ServerTransportStream of a server call that
// accepts headers and trailers.
type trailerStream struct{}

func (trailerStream) Method() string               { return emptyCall }
func (trailerStream) SetHeader(metadata.MD) error  { return nil }
func (trailerStream) SendHeader(metadata.MD) error { return nil }
func (trailerStream) SetTrailer(metadata.MD) error { return nil }

// TestRefusalEventRecordingSpan calls the interceptor with a recording span
// directly: the event is added on the refused call only.
func TestRefusalEventRecordingSpan(t *testing.T) {
	sr, tracer := newRecorder(t)
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{ratelimit.NewGuard("never", mustLimiter(t, 0, 1))}}})
	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for i := range 2 {
		ctx, span := tracer.Start(context.Background(), "call")
		_, err := s.unary(ctx, nil, info, handler)
		span.End()
		if want := i == 1; (status.Code(err) == codes.ResourceExhausted) != want {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	spans := sr.Ended()
	if len(spans) != 2 || len(refusalEvents(spans[0])) != 0 || len(refusalEvents(spans[1])) != 1 {
		t.Fatalf("events per span: want none on the admitted call, one on the refused one")
	}
	ev := refusalEvents(spans[1])[0]
	if _, ok := ev[attrRetryAfter]; ok {
		t.Errorf("a refusal no wait can cure carries levee.retry_after = %v, want none", ev[attrRetryAfter])
	}
	if ev[attrGuard].AsString() != "never" {
		t.Errorf("levee.guard = %q, want never", ev[attrGuard].AsString())
	}
}

// BenchmarkRefusedUnary measures a refused unary call through the
// interceptor with no span, with a span that is not recording (a
// sampled-out call) and with a recording span, which adds the event.
func BenchmarkRefusedUnary(b *testing.B) {
	_, tracer := newRecorderB(b)
	s := mustServer(b, []decide.Rule{{Guards: []admission.Guard{ratelimit.NewGuard("never", mustLimiter(b, 0, 1))}}})
	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	base := grpc.NewContextWithServerTransportStream(context.Background(), trailerStream{})
	if _, err := s.unary(base, nil, info, handler); err != nil {
		b.Fatal(err) // spends the only token
	}
	notRecording := trace.ContextWithSpanContext(base, trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}))
	recording, span := tracer.Start(base, "call")
	defer span.End()
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{{"no span", base}, {"span not recording", notRecording}, {"span recording", recording}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.unary(bc.ctx, nil, info, handler); err == nil {
					b.Fatal("admitted")
				}
			}
		})
	}
}

// newRecorderB is newRecorder for a benchmark; the recorder drops nothing,
// so a recording span keeps every event (as an SDK span does up to its
// event limit).
func newRecorderB(b *testing.B) (*tracetest.SpanRecorder, trace.Tracer) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return sr, tp.Tracer("grpcguard-bench")
}
