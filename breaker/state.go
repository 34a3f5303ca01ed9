package breaker

import (
	"context"
	"errors"
	"strconv"
)

// State is the state of a Breaker. The zero value is StateClosed.
type State uint8

const (
	// StateClosed admits every call and records outcomes in the sliding
	// window; the breaker opens when a rate reaches its threshold.
	StateClosed State = iota
	// StateOpen refuses every call with ErrOpen until the wait in open has
	// passed; the next call then moves the breaker to StateHalfOpen. With
	// WithOpenProbes it lets one call in n through as a probe, and the
	// first that succeeds moves it to StateHalfOpen at once.
	StateOpen
	// StateHalfOpen admits a fixed number of probe calls and refuses the
	// rest with ErrTooManyCalls; once every probe has finished, their
	// outcomes judged together close or reopen the breaker.
	StateHalfOpen
	// StateForcedOpen refuses every call with ErrOpen until an operator
	// calls Reset or Disable. Nothing is recorded.
	StateForcedOpen
	// StateDisabled admits every call and records nothing until an operator
	// calls Reset or ForceOpen.
	StateDisabled
)

// String returns the state's name: "closed", "open", "half-open",
// "forced-open" or "disabled".
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateOpen:
		return "open"
	case StateHalfOpen:
		return "half-open"
	case StateForcedOpen:
		return "forced-open"
	case StateDisabled:
		return "disabled"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Outcome is how the breaker counts a finished call. The zero value is
// Success.
type Outcome uint8

const (
	// Success counts as a successful call.
	Success Outcome = iota
	// Failure counts towards the failure rate.
	Failure
	// Ignore is not recorded at all; in half-open it gives the probe
	// permit back so another call can probe.
	Ignore
)

// String returns "success", "failure" or "ignore".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Ignore:
		return "ignore"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// refusal is the type of the package's sentinel errors. It reports
// LocalRefusal, the marker other breakers use to recognise calls refused
// by a guard in this process (see WithLocalRefusalsCounted).
type refusal struct {
	msg    string
	parent error
}

func (r *refusal) Error() string { return r.msg }

// LocalRefusal reports that the call never left the process.
func (r *refusal) LocalRefusal() bool { return true }

// Is makes ErrTooManyCalls match ErrOpen.
func (r *refusal) Is(target error) bool { return r.parent != nil && target == r.parent }

var (
	// ErrOpen is returned by Allow and Execute while the breaker is open or
	// forced open. The call was not made.
	ErrOpen error = &refusal{msg: "breaker: circuit open"}

	// ErrTooManyCalls is returned while the breaker is half-open and every
	// permitted probe call is still in flight: the breaker is testing the
	// backend with a few calls and refuses the others until those finish.
	// errors.Is(ErrTooManyCalls, ErrOpen) is true, so callers that treat
	// any refusal alike need to check ErrOpen only.
	ErrTooManyCalls error = &refusal{msg: "breaker: half-open, all probe calls in flight", parent: ErrOpen}
)

// localRefusal is implemented by errors of guards that refuse calls locally
// (this package's sentinels, throttle.ErrThrottled).
type localRefusal interface{ LocalRefusal() bool }

// IsLocalRefusal reports whether err's chain, joined errors included,
// holds an error whose LocalRefusal method returns true: a call refused in
// this process (ErrOpen, ErrTooManyCalls, throttle.ErrThrottled, levee's
// client refusals), which the breaker ignores unless
// WithLocalRefusalsCounted. It does not allocate.
func IsLocalRefusal(err error) bool {
	return isLocalRefusal(err)
}

// isLocalRefusal walks err's chain, including joined errors, without
// allocating.
func isLocalRefusal(err error) bool {
	for err != nil {
		if r, ok := err.(localRefusal); ok && r.LocalRefusal() {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if isLocalRefusal(e) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// DefaultClassifier is the classifier used unless WithClassifier is given:
// a nil error is a Success, an error matching context.Canceled is ignored
// (the caller gave up; the backend is not to blame) and every other error
// is a Failure. Deadline errors are failures. It knows no transport, so
// it cannot tell an application's errors from a backend's overload: give
// a breaker of gRPC calls grpcguard.ClassifyError (levee's gRPC client
// does), which counts only overload answers.
func DefaultClassifier(err error) Outcome {
	if err == nil {
		return Success
	}
	if errors.Is(err, context.Canceled) {
		return Ignore
	}
	return Failure
}
