package grpcguard

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/throttle"
)

// ErrClientRefused matches (errors.Is) every error with which a Client
// refuses a call locally. Such an error also has the status UNAVAILABLE
// (status.Code), a message naming the guard and the target, a
// google.rpc.RetryInfo detail when the guard knows when a retry may
// succeed (RetryDelay reads it), reports LocalRefusal() == true, and wraps
// breaker.ErrOpen, breaker.ErrTooManyCalls or throttle.ErrThrottled when
// the breaker or the throttle refused.
var ErrClientRefused = errors.New("grpcguard: call refused by a client guard")

// clientRefusal is the error of a call a Client refused locally.
type clientRefusal struct {
	st     *status.Status
	msg    string
	cause  error // breaker.ErrOpen, breaker.ErrTooManyCalls, throttle.ErrThrottled, or nil
	reason string
}

func (e *clientRefusal) Error() string              { return e.msg }
func (e *clientRefusal) GRPCStatus() *status.Status { return e.st }
func (e *clientRefusal) LocalRefusal() bool         { return true }
func (e *clientRefusal) Unwrap() error              { return e.cause }
func (e *clientRefusal) Is(target error) bool       { return target == ErrClientRefused }

// refusal returns the error of a call that guard i refused with d.
func (e *clientEntry) refusal(i int, d admission.Decision) error {
	delay := d.RetryAfter > 0 && d.RetryAfter != admission.Never
	if !delay {
		if r := e.refusals[i].Load(); r != nil && r.reason == d.Reason {
			return r
		}
	}
	st := status.New(codes.Unavailable, "levee: client "+e.chain.Guard(i).Name()+": "+d.Reason+" ("+e.target.name+")")
	if delay {
		if ws, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}); err == nil {
			st = ws
		}
	}
	r := &clientRefusal{st: st, msg: "rpc error: code = " + st.Code().String() + " desc = " + st.Message(), reason: d.Reason}
	switch d.Reason {
	case breaker.ReasonOpen:
		r.cause = breaker.ErrOpen
	case breaker.ReasonProbing:
		r.cause = breaker.ErrTooManyCalls
	case throttle.ReasonThrottled:
		r.cause = throttle.ErrThrottled
	}
	if !delay {
		e.refusals[i].Store(r)
	}
	return r
}
