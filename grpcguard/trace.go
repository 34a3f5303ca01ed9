package grpcguard

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// RefusalEvent is the name of the span event a refused call adds to its
// span, when one is recording. Its attributes are levee.guard (the
// refusing guard's name), levee.reason (the reason its ErrorInfo
// carries, RUN_QUEUE_FULL say, as the otelmetrics series' attribute of
// that name), levee.message (the Decision's reason in words) and, when
// the refusal carries a retry delay, levee.retry_after (seconds).
//
// Which refusals carry it: those decided where the call's context holds
// the span, that is by UnaryServerInterceptor and StreamServerInterceptor
// (the rechecks of a call the tap admitted, such as a deadline or a queue
// delay that ran out, and whole rules when the tap is not installed) and
// by MiddlewareLimiter. A refusal in TapHandle carries none: the tap runs
// before grpc-go creates the stream and before stats handlers (such as
// OpenTelemetry's otelgrpc) start the call's span, so there is no span to
// add it to; those refusals are counted in the Server's Stats.
const RefusalEvent = "levee.refusal"

// Attribute keys of the RefusalEvent.
const (
	attrGuard      = attribute.Key("levee.guard")
	attrReason     = attribute.Key("levee.reason")
	attrMessage    = attribute.Key("levee.message")
	attrRetryAfter = attribute.Key("levee.retry_after")
)

// traceRefusal adds the RefusalEvent to the span of ctx if one is
// recording. When none is, it costs a context lookup and allocates
// nothing.
func traceRefusal(ctx context.Context, rf decide.Refusal) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attrGuard.String(rf.Guard), attrReason.String(string(rf.Reason)), attrMessage.String(rf.Message)}
	if rf.RetryAfter > 0 && rf.RetryAfter != admission.Never {
		attrs = append(attrs, attrRetryAfter.Float64(rf.RetryAfter.Seconds()))
	}
	span.AddEvent(RefusalEvent, trace.WithAttributes(attrs...))
}
