package loadgen

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/grpcguard"
)

// PushbackTrailer is the trailer a gRPC server sets to tell clients how
// many milliseconds to wait before retrying (negative: do not retry).
const PushbackTrailer = "grpc-retry-pushback-ms"

// outcome is the class of a request's final result.
type outcome int

const (
	outcomeSucceeded outcome = iota
	outcomeRefused
	outcomeTimedOut
	outcomeFailed
)

// codeOf returns the gRPC status code of err. Context errors map to
// DEADLINE_EXCEEDED and CANCELLED even when they are not status errors.
func codeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return codes.DeadlineExceeded
	}
	if errors.Is(err, context.Canceled) {
		return codes.Canceled
	}
	return status.Code(err)
}

// pushbackError carries a server's pushback alongside the call's error.
type pushbackError struct {
	err error
	d   time.Duration
}

func (e *pushbackError) Error() string { return e.err.Error() }
func (e *pushbackError) Unwrap() error { return e.err }

// Pushback returns err annotated with the server's retry pushback d
// (negative: the server asked not to retry), for a CallFunc that read it
// from somewhere the generator cannot see. status.Code of the result is
// that of err. It returns nil if err is nil.
func Pushback(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &pushbackError{err: err, d: d}
}

// PushbackFromTrailer returns err annotated with the pushback in the
// grpc-retry-pushback-ms entry of trailer, as a grpc-go CallFunc receives
// it with grpc.Trailer. Without a well-formed entry, or if err is nil, it
// returns err unchanged. A value that is not an integer is a "do not
// retry", as gRPC's retry design specifies.
func PushbackFromTrailer(err error, trailer metadata.MD) error {
	if err == nil {
		return nil
	}
	v := trailer.Get(PushbackTrailer)
	if len(v) == 0 {
		return err
	}
	ms, perr := strconv.ParseInt(v[0], 10, 64)
	if perr != nil {
		return Pushback(err, -1)
	}
	return Pushback(err, time.Duration(ms)*time.Millisecond)
}

// pushbackOf returns the pushback carried by err: from Pushback, else from
// a google.rpc.RetryInfo status detail.
func pushbackOf(err error) (time.Duration, bool) {
	var pe *pushbackError
	if errors.As(err, &pe) {
		return pe.d, true
	}
	return grpcguard.RetryDelay(err)
}

// ParseCode parses a status code name as grpc-go prints it
// ("ResourceExhausted") or as the gRPC spec spells it
// ("RESOURCE_EXHAUSTED").
func ParseCode(s string) (codes.Code, error) {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == s {
			return c, nil
		}
	}
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(strconv.Quote(s))); err == nil {
		return c, nil
	}
	return 0, fmt.Errorf("%w: unknown status code %q", ErrInvalid, s)
}
