package grpcguard

import (
	"context"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/rpcstatus"
)

// PushbackTrailer is the trailer by which a server tells grpc-go clients
// with a retry policy how long to wait before retrying (gRFC A6). A negative
// value asks them not to retry.
const PushbackTrailer = "grpc-retry-pushback-ms"

// refusalStatus returns the status of a refusal: its code, a message
// naming the guard, a google.rpc.ErrorInfo detail (errorInfo), a
// google.rpc.RetryInfo detail with the retry delay when there is one,
// and a google.rpc.QuotaFailure detail for a per-key refusal. It adds the RefusalEvent to the span of ctx, if one is
// recording. A status without a per-key detail comes from refusals, when
// the same one was built last in its slot.
func refusalStatus(ctx context.Context, rf decide.Refusal) *status.Status {
	traceRefusal(ctx, rf)
	return refusals.Get(rf, buildRefusal)
}

// refusals holds the statuses last built for refusals without a per-key
// detail. A server under overload refuses thousands of calls a second
// with a few statuses, and building one (its RetryInfo marshalled into
// an Any) costs a dozen allocations (see BenchmarkRefusalStatus). A
// status is immutable once built (status.Status hands out copies of its
// proto), so refusals on every goroutine and Server share it.
var refusals rpcstatus.Cache[*status.Status]

// buildRefusal builds the status that refusalStatus returns: the
// refusal's code, message and details (internal/rpcstatus), as every
// front-end renders them.
func buildRefusal(rf decide.Refusal) *status.Status {
	st := status.New(codes.Code(rf.Code), rpcstatus.Message(rf))
	ds := rpcstatus.Details(rf)
	details := make([]protoadapt.MessageV1, len(ds))
	for i, d := range ds {
		details[i] = protoadapt.MessageV1Of(d)
	}
	withDetails, err := st.WithDetails(details...)
	if err != nil {
		return st // cannot happen with these well-formed messages
	}
	return withDetails
}

// pushback returns the value of the pushback trailer of a refusal
// (rpcstatus.Pushback): whole milliseconds of its retry delay rounded up,
// -1 for a refusal that tells its client not to retry, and "" when there
// is no delay to announce.
func pushback(rf decide.Refusal) string { return rpcstatus.Pushback(rf) }

// setPushback attaches the pushback trailer v (none when "") to a unary
// call's context, or to a stream when ss is not nil.
func setPushback(ctx context.Context, ss grpc.ServerStream, v string) {
	if v == "" {
		return
	}
	md := metadata.Pairs(PushbackTrailer, v)
	if ss != nil {
		ss.SetTrailer(md)
		return
	}
	_ = grpc.SetTrailer(ctx, md) // fails only outside a server call
}

// RetryDelay returns the retry delay a levee refusal carries — its
// google.rpc.RetryInfo detail — and whether there is one. Clients use it
// to hold off; the pushback trailer carries the same delay for grpc-go's
// built-in retries. A RetryInfo whose delay is negative or not a valid
// google.protobuf.Duration (seconds and nanos of different signs, nanos out
// of range) is not a delay: RetryDelay skips it. A delay beyond
// time.Duration's range is the largest Duration. The delay returned is
// never negative.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			if delay, ok := rpcstatus.RetryDelay(ri); ok {
				return delay, true
			}
		}
	}
	return 0, false
}
