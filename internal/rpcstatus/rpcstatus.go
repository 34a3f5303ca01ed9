// Package rpcstatus renders an engine's refusal (decide.Refusal) as the
// google.rpc.Status every protocol levee speaks carries — its code, its
// message, and its details (ErrorInfo, RetryInfo, QuotaFailure) — and
// the retry hints beside it: the gRPC pushback trailer and HTTP's
// Retry-After. The front-ends (grpcguard, connectguard, httpguard) all
// build their refusals from it, so that a refusal says the same on every
// transport.
package rpcstatus

import (
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/levee-go/levee/decide"
)

// Message returns the message of a refusal: "levee: " + its guard + ": "
// + its reason in words.
func Message(rf decide.Refusal) string {
	return "levee: " + rf.Guard + ": " + rf.Message
}

// Details returns the error details of a refusal, in this order: its
// google.rpc.ErrorInfo (ErrorInfo); a google.rpc.RetryInfo with its retry
// delay, when it has one that a wait can meet; and a
// google.rpc.QuotaFailure naming its key (made valid UTF-8), when it
// refused the key rather than the method.
func Details(rf decide.Refusal) []proto.Message {
	ds := []proto.Message{ErrorInfo(rf)}
	if rf.RetryAfter > 0 && rf.RetryAfter != math.MaxInt64 {
		ds = append(ds, &errdetails.RetryInfo{RetryDelay: durationpb.New(rf.RetryAfter)})
	}
	if rf.PerKey {
		ds = append(ds, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     ValidUTF8(rf.Key),
			Description: rf.Message,
		}}})
	}
	return ds
}

// ErrorInfo is the google.rpc.ErrorInfo detail of a refusal: its reason
// (decide.Reason) in the domain decide.ErrorDomain, and metadata naming
// the guard ("guard"), the evidence of overload it refused on
// ("evidence", "none" when it names none) with its measure ("value") and
// the level it was judged against ("threshold"), to two significant
// digits (Round2), where the guard tells them, and under sustained
// overload the guard's own reason ("cause").
func ErrorInfo(rf decide.Refusal) *errdetails.ErrorInfo {
	md := map[string]string{"guard": rf.Guard, "evidence": rf.Evidence.String()}
	if v := Round2(rf.Value); v != 0 {
		md["value"] = strconv.FormatFloat(float64(v), 'g', -1, 32)
	}
	if v := Round2(rf.Threshold); v != 0 {
		md["threshold"] = strconv.FormatFloat(float64(v), 'g', -1, 32)
	}
	if rf.Cause != rf.Reason && rf.Cause != "" {
		md["cause"] = string(rf.Cause)
	}
	return &errdetails.ErrorInfo{Reason: string(rf.Reason), Domain: decide.ErrorDomain, Metadata: md}
}

// Round2 rounds v to two significant digits, which is all a caller
// needs of the evidence's figures (and lets refusals on the same evidence
// share a cached status); 0 for NaN or an infinity, which are not
// figures.
func Round2(v float32) float32 {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) || v == 0 {
		return 0
	}
	p := math.Pow(10, 1-math.Floor(math.Log10(math.Abs(f))))
	return float32(math.Round(f*p) / p)
}

// ValidUTF8 returns s with each run of bytes that is not UTF-8 replaced
// by U+FFFD: a protobuf string must be UTF-8, or the status would not
// marshal and lose its other details too, and a key read from a -bin
// header or a raw header value need not be.
func ValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// Status returns the google.rpc.Status of a refusal: its code, Message
// and Details.
func Status(rf decide.Refusal) *spb.Status {
	st := &spb.Status{Code: int32(rf.Code), Message: Message(rf)}
	for _, d := range Details(rf) {
		a, err := anypb.New(d)
		if err != nil {
			continue // cannot happen: the details are well-formed messages
		}
		st.Details = append(st.Details, a)
	}
	return st
}

// Pushback returns the value of the gRPC pushback trailer
// (grpc-retry-pushback-ms, gRFC A6) of a refusal: "-1" when it tells its
// client not to retry (NoRetry, or a delay no wait meets), its retry
// delay in whole milliseconds rounded up, or "" when it has no delay to
// announce.
func Pushback(rf decide.Refusal) string {
	switch {
	case rf.NoRetry || rf.RetryAfter == math.MaxInt64:
		return "-1"
	case rf.RetryAfter <= 0:
		return ""
	}
	ms := rf.RetryAfter / time.Millisecond
	if rf.RetryAfter%time.Millisecond != 0 {
		ms++ // rounded up; adding a millisecond first would overflow near the largest Duration
	}
	return strconv.FormatInt(int64(ms), 10)
}

// RetryAfter returns the value of HTTP's Retry-After header (RFC 9110
// §10.2.3) for a retry delay: whole seconds, rounded up, at least 1
// (HTTP has no finer unit, and 0 would invite an immediate retry); ""
// when there is no delay to announce (d <= 0) or no wait helps (d is the
// largest Duration, admission.Never). HTTP has no "do not retry": a
// refusal that tells gRPC clients not to retry keeps its Retry-After.
func RetryAfter(d time.Duration) string {
	if d <= 0 || d == math.MaxInt64 {
		return ""
	}
	s := d / time.Second
	if d%time.Second != 0 {
		s++
	}
	return strconv.FormatInt(int64(s), 10)
}

// RetryDelay returns the delay of a RetryInfo detail, and whether it is
// one: a delay that is negative or not a valid google.protobuf.Duration
// (seconds and nanos of different signs, nanos out of range), or absent,
// is not. A delay beyond time.Duration's range is the largest Duration.
func RetryDelay(ri *errdetails.RetryInfo) (time.Duration, bool) {
	pd := ri.GetRetryDelay()
	if pd == nil || pd.GetSeconds() < 0 || pd.GetNanos() < 0 || pd.GetNanos() > 999_999_999 {
		return 0, false
	}
	return pd.AsDuration(), true
}
