package grpcguard

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
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
	if rf.PerKey {
		return buildRefusal(rf)
	}
	rf.Value, rf.Threshold = round2(rf.Value), round2(rf.Threshold)
	slot := &refusals[refusalSlot(rf)]
	if c := slot.Load(); c != nil && c.rf == rf {
		return c.st
	}
	st := buildRefusal(rf)
	slot.Store(&cachedRefusal{rf: rf, st: st})
	return st
}

// round2 rounds v to two significant digits, which is all a caller
// needs of the evidence's figures, so that refusals on the same evidence
// share a cached status.
func round2(v float32) float32 {
	if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
		return 0 // not a figure
	}
	if v == 0 {
		return 0
	}
	f := float64(v)
	p := math.Pow(10, 1-math.Floor(math.Log10(math.Abs(f))))
	return float32(math.Round(f*p) / p)
}

// refusals holds the statuses last built for refusals without a per-key
// detail, in slots by refusalSlot. A server under overload refuses
// thousands of calls a second with a few statuses, and building one (its
// RetryInfo marshalled into an Any) costs a dozen allocations (see
// BenchmarkRefusalStatus). A status is immutable once built (status.Status
// hands out copies of its proto), so refusals on every goroutine and
// Server share it.
var refusals [16]atomic.Pointer[cachedRefusal]

type cachedRefusal struct {
	rf decide.Refusal // not per key: its Key is ""
	st *status.Status
}

// refusalSlot spreads refusals over the slots of refusals by what tells
// them apart most often: the guard, its reason and the retry delay.
func refusalSlot(rf decide.Refusal) int {
	h := uint64(rf.Code)*0x9e3779b97f4a7c15 ^ uint64(len(rf.Guard))<<32 ^ uint64(len(rf.Message))<<40 ^ uint64(rf.RetryAfter) ^
		uint64(len(rf.Reason))<<48 ^ uint64(rf.Evidence)<<56 ^ uint64(math.Float32bits(rf.Value))<<8 ^ uint64(math.Float32bits(rf.Threshold))
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	return int(h % uint64(len(refusals)))
}

// buildRefusal builds the status that refusalStatus returns.
func buildRefusal(rf decide.Refusal) *status.Status {
	st := status.New(codes.Code(rf.Code), "levee: "+rf.Guard+": "+rf.Message)
	details := []protoadapt.MessageV1{errorInfo(rf)}
	if rf.RetryAfter > 0 && rf.RetryAfter != admission.Never {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(rf.RetryAfter)})
	}
	if rf.PerKey {
		key := rf.Key
		if !utf8.ValidString(key) {
			// A protobuf string must be UTF-8, or the status would not
			// marshal and lose its RetryInfo too; a key read from a -bin
			// header or a raw header value need not be.
			key = strings.ToValidUTF8(key, "\uFFFD")
		}
		details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     key,
			Description: rf.Message,
		}}})
	}
	withDetails, err := st.WithDetails(details...)
	if err != nil {
		return st // cannot happen with these well-formed messages
	}
	return withDetails
}

// errorInfo is the google.rpc.ErrorInfo detail of a refusal: its reason
// (decide.Reason) in the domain decide.ErrorDomain, and metadata naming
// the guard ("guard"), the evidence of overload it refused on
// ("evidence", "none" when it names none) with its measure ("value") and
// the level it was judged against ("threshold") where the guard tells
// them, and under sustained overload the guard's own reason ("cause").
func errorInfo(rf decide.Refusal) *errdetails.ErrorInfo {
	md := map[string]string{"guard": rf.Guard, "evidence": rf.Evidence.String()}
	if rf.Value != 0 {
		md["value"] = strconv.FormatFloat(float64(rf.Value), 'g', -1, 32)
	}
	if rf.Threshold != 0 {
		md["threshold"] = strconv.FormatFloat(float64(rf.Threshold), 'g', -1, 32)
	}
	if rf.Cause != rf.Reason && rf.Cause != "" {
		md["cause"] = string(rf.Cause)
	}
	return &errdetails.ErrorInfo{Reason: string(rf.Reason), Domain: decide.ErrorDomain, Metadata: md}
}

// pushback returns the value of the pushback trailer of a refusal: whole
// milliseconds of its retry delay rounded up, -1 for a refusal that tells
// its client not to retry, and "" when there is no delay to announce.
func pushback(rf decide.Refusal) string {
	switch {
	case rf.NoRetry || rf.RetryAfter == admission.Never:
		return "-1"
	case rf.RetryAfter <= 0:
		return ""
	}
	ms := rf.RetryAfter / time.Millisecond
	if rf.RetryAfter%time.Millisecond != 0 {
		ms++ // rounded up; adding a millisecond first would overflow near Never
	}
	return strconv.FormatInt(int64(ms), 10)
}

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
		ri, ok := d.(*errdetails.RetryInfo)
		if !ok || ri.GetRetryDelay() == nil {
			continue
		}
		pd := ri.GetRetryDelay()
		if pd.GetSeconds() < 0 || pd.GetNanos() < 0 || pd.GetNanos() > 999_999_999 {
			continue
		}
		return pd.AsDuration(), true
	}
	return 0, false
}
