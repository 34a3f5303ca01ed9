package grpcguard

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/throttle"
)

// ClassifyError is the default classification of a finished client call,
// used by the throttle and breaker guards of a Client (see
// WithClassifier). Only the backend's overload answers count against it,
// as the SRE book's client-side throttling has it: an error the backend
// answered with after doing the work says nothing about its load, and
// counting it would make the client throttle, or cut off, a healthy
// backend because of its callers' bad requests or its own bugs.
//
//   - Failure — the backend refused the call or could not answer it in
//     time: UNAVAILABLE (including a server's UpstreamOverloaded answer,
//     and no backend reachable), RESOURCE_EXHAUSTED from a server refusal,
//     and DEADLINE_EXCEEDED (with context.DeadlineExceeded). A timeout
//     counts: it is what an overloaded backend without a load shedder of
//     its own answers, its calls queueing until their deadlines pass.
//     Where calls end at their deadline on a healthy backend (long polls,
//     streams that live until their deadline), classify them yourself
//     with WithClassifier.
//   - Success — a nil error, and every answer of the application:
//     UNKNOWN (which grpc-go returns for a handler's plain Go error),
//     INTERNAL, DATA_LOSS, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
//     FAILED_PRECONDITION, PERMISSION_DENIED, UNAUTHENTICATED, ABORTED,
//     OUT_OF_RANGE, UNIMPLEMENTED, any other code; an error that carries
//     no status (from an interceptor or code of your own); and
//     RESOURCE_EXHAUSTED produced by grpc-go's message size limits
//     ("received message larger than max"), which is about the message,
//     not the backend's load.
//   - Ignore — CANCELED and context.Canceled (the caller gave up; the
//     backend is not to blame), and local refusals: errors whose chain
//     holds a LocalRefusal() bool method returning true, such as this
//     package's client refusals, breaker.ErrOpen or throttle.ErrThrottled
//     (the backend never saw the call). A message-size refusal of a
//     request grpc-go would not send ("trying to send message larger
//     than max") is ignored for the same reason.
//
// An application that knows some of its own errors mean overload — a
// status its server returns when a pool or queue of its own is full, say
// — says so with a classifier that returns Failure for them and defers to
// ClassifyError for the rest (see WithClassifier's example).
//
// It allocates nothing for nil errors and errors built by package status.
func ClassifyError(err error) breaker.Outcome {
	if err == nil {
		return breaker.Success
	}
	if isLocalRefusal(err) {
		return breaker.Ignore
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); !ok {
		// Only look for context errors in errors that are not a status:
		// grpc-go turns a call's context errors into statuses itself.
		if errors.Is(err, context.Canceled) {
			return breaker.Ignore
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return breaker.Failure
		}
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Canceled:
		return breaker.Ignore
	case codes.Unavailable, codes.DeadlineExceeded:
		return breaker.Failure
	case codes.ResourceExhausted:
		msg := st.Message()
		if strings.Contains(msg, "larger than max") {
			if strings.Contains(msg, "trying to send") {
				return breaker.Ignore
			}
			return breaker.Success
		}
		return breaker.Failure
	default:
		// OK, and every answer of the application, including UNKNOWN
		// for errors that carry no status.
		return breaker.Success
	}
}

// isLocalRefusal reports whether err's chain holds a call refused in this
// process; see breaker.IsLocalRefusal.
func isLocalRefusal(err error) bool { return breaker.IsLocalRefusal(err) }

// Judge returns the throttle.Judge that reads a finished call through
// classify: Success is an accept, Failure is not, Ignore is not counted.
// A Client judges its throttles' calls with Judge(its classifier); give
// Judge(ClassifyError) to a throttle.NewGuard of your own to judge gRPC
// codes the same way.
func Judge(classify func(error) breaker.Outcome) throttle.Judge {
	return func(o admission.Outcome) (accepted, counted bool) {
		switch classify(o.Err) {
		case breaker.Success:
			return true, true
		case breaker.Failure:
			return false, true
		}
		return false, false
	}
}
