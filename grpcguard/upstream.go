package grpcguard

import (
	"context"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/decide"
)

// The answer "overloaded, don't retry" (the SRE book's, "Handling
// Overload"): a server whose own call to a downstream failed because the
// downstream is overloaded answers its caller so that the caller does not
// retry either. Retrying at every hop of a chain multiplies the load on
// the overloaded service at the bottom by the attempts of every hop; with
// this answer only the hop next to the overloaded service retries, within
// its budget (WithRetries, WithRetryBudget).
//
// The answer is the status UNAVAILABLE — the server cannot serve the call
// now, through no fault of the caller — with the message "levee:
// downstream overloaded: " and the downstream's status, a
// google.rpc.ErrorInfo detail with the reason ReasonUpstreamOverloaded in
// the domain ErrorDomain (its metadata names the downstream's code), no
// google.rpc.RetryInfo detail, and a grpc-retry-pushback-ms trailer of -1,
// by which grpc-go's retry policies (gRFC A6) stop retrying too. levee's
// Client never retries it, and sets no hold-off from it. Its caller's
// breakers and throttles count it as a failure, like any UNAVAILABLE.
const (
	// ReasonUpstreamOverloaded is the google.rpc.ErrorInfo reason of the
	// answer: the server's downstream is overloaded; do not retry.
	ReasonUpstreamOverloaded = "LEVEE_UPSTREAM_OVERLOADED"
	// ErrorDomain is the google.rpc.ErrorInfo domain of levee's answers
	// and refusals (decide.ErrorDomain).
	ErrorDomain = decide.ErrorDomain
	// legacyErrorDomain is the domain levee's answers had before; a
	// client still recognises it, for one release.
	legacyErrorDomain = "levee.dev"
)

// IsDownstreamOverload reports whether err, the error of a call a server
// made to its own downstream, says that the downstream is overloaded or
// unreachable: refused in this process by a client guard (ErrClientRefused,
// breaker.ErrOpen, throttle.ErrThrottled: any error reporting
// LocalRefusal), or answered with RESOURCE_EXHAUSTED (not a message-size
// error), UNAVAILABLE or DEADLINE_EXCEEDED (context.DeadlineExceeded too),
// which includes the downstream's own UpstreamOverloaded answer. The
// caller's own cancellation (CANCELED) is not.
func IsDownstreamOverload(err error) bool {
	if err == nil {
		return false
	}
	if isLocalRefusal(err) {
		return true
	}
	if !IsOverload(err) {
		return false
	}
	st := status.Convert(err)
	return st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max")
}

// IsUpstreamOverloaded reports whether err is a server's "overloaded,
// don't retry" answer: a status with a google.rpc.ErrorInfo detail of
// reason ReasonUpstreamOverloaded in ErrorDomain.
func IsUpstreamOverloaded(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return false
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == ReasonUpstreamOverloaded && (ei.GetDomain() == ErrorDomain || ei.GetDomain() == legacyErrorDomain) {
			return true
		}
	}
	return false
}

// UpstreamOverloaded maps err, the error of a call the server made to its
// downstream while serving ctx's call, to the server's answer: when
// IsDownstreamOverload(err), the "overloaded, don't retry" answer (see
// ReasonUpstreamOverloaded), with the pushback trailer of -1 set on ctx's
// call; otherwise err itself, unchanged. A handler returns its result:
//
//	resp, err := warehouse.Reserve(ctx, req)
//	if err != nil {
//		return nil, grpcguard.UpstreamOverloaded(ctx, err)
//	}
//
// ctx is the handler's context (unary or stream); outside a server call
// the trailer is not set and the answer is still returned.
func UpstreamOverloaded(ctx context.Context, err error) error {
	if !IsDownstreamOverload(err) {
		return err
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs(PushbackTrailer, "-1")) // fails only outside a server call
	return upstreamStatus(err).Err()
}

// upstreamStatus is the answer to a call whose downstream call failed
// with err.
func upstreamStatus(err error) *status.Status {
	code := status.Code(err)
	if isLocalRefusal(err) {
		code = codes.Unavailable
	}
	msg := err.Error()
	if s, ok := status.FromError(err); ok {
		msg = s.Message()
	}
	st := status.New(codes.Unavailable, "levee: downstream overloaded: "+code.String()+": "+msg)
	withInfo, werr := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   ReasonUpstreamOverloaded,
		Domain:   ErrorDomain,
		Metadata: map[string]string{"downstream_code": code.String()},
	})
	if werr != nil {
		return st // cannot happen with this well-formed message
	}
	return withInfo
}
