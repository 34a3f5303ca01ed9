package grpcguard

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/throttle"
)

// Reasons given by the client-side guards, besides ReasonBreaker and
// ReasonThrottled.
const (
	ReasonProbing = "circuit breaker half-open, its probe calls in flight"
	ReasonHoldOff = "holding off after the server pushed back"
)

// Costs of the client-side guards (see coster): the hold-off check is one
// atomic load and runs first; the throttle runs before the breaker, whose
// half-open probe permits are the scarcer resource.
const (
	costHoldOff  = costDeadline - 5
	costThrottle = costSlot + 5
)

// ClassifyError is the default classification of a finished client call,
// used by the throttle and breaker guards of a Client (see
// WithClassifier) and by the Throttle adapter:
//
//   - Success: a nil error, and every status by which the backend answered
//     the call itself — INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
//     FAILED_PRECONDITION, PERMISSION_DENIED, UNAUTHENTICATED, ABORTED,
//     OUT_OF_RANGE, UNIMPLEMENTED — and RESOURCE_EXHAUSTED produced by
//     grpc-go's message size limits ("larger than max"), which is about
//     the request, not the backend's load.
//   - Failure: UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN (which
//     includes errors that carry no status), RESOURCE_EXHAUSTED from a
//     server refusal, and DATA_LOSS (a server fault like INTERNAL).
//   - Ignore: CANCELED and context.Canceled (the caller gave up; the
//     backend is not to blame), and local refusals — errors whose chain
//     holds a LocalRefusal() bool method returning true, such as this
//     package's client refusals, breaker.ErrOpen or throttle.ErrThrottled:
//     the backend never saw the call. A message-size refusal of a request
//     grpc-go would not send ("trying to send message larger than max") is
//     ignored for the same reason.
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
	case codes.OK:
		return breaker.Success
	case codes.Canceled:
		return breaker.Ignore
	case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Unknown, codes.DataLoss:
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
		return breaker.Success
	}
}

// isLocalRefusal reports whether err's chain holds a call refused in this
// process; see breaker.IsLocalRefusal.
func isLocalRefusal(err error) bool { return breaker.IsLocalRefusal(err) }

// skippedCall is what a breaker guard reports for an admitted call that a
// later guard refused: a local refusal, which the breaker ignores by
// default (giving a half-open probe permit back).
var skippedCall error = skipped{}

type skipped struct{}

func (skipped) Error() string      { return "grpcguard: call refused by a later guard before it was sent" }
func (skipped) LocalRefusal() bool { return true }

// Breaker adapts a circuit breaker: Admit asks it with the call's time
// (AllowAt) and refuses while it is open (ReasonBreaker) or half-open with
// every probe in flight (ReasonProbing); Finish reports the call's error
// and duration to the Permit (Done), and the breaker's own classifier
// judges the error — give it breaker.WithClassifier(ClassifyError) to judge
// gRPC codes; a Client does so for the breakers it creates. A call that a
// later guard refused is reported as a local refusal, which the breaker
// ignores by default (see breaker.WithLocalRefusalsCounted), so a
// half-open probe permit goes back. The refusal has no retry delay: the
// breaker does not say when it will next let a call through.
func Breaker(name string, b *breaker.Breaker) Guard {
	if b == nil {
		panic("grpcguard: Breaker: breaker must not be nil")
	}
	return &breakerGuard{name: name, b: b}
}

type breakerGuard struct {
	name string
	b    *breaker.Breaker
}

func (g *breakerGuard) Name() string { return g.name }
func (g *breakerGuard) cost() int    { return costBreaker }
func (g *breakerGuard) timed() bool  { return true }

func (g *breakerGuard) Admit(c Call) Decision {
	p, err := g.b.AllowAt(c.Now)
	if err == nil {
		return Decision{Permit: Permit{brk: p}}
	}
	if err == breaker.ErrTooManyCalls {
		return Refuse(ReasonProbing, 0)
	}
	return Refuse(ReasonBreaker, 0)
}

func (g *breakerGuard) Finish(_ Call, p Permit, o Outcome) {
	if o.Skipped {
		p.brk.Done(skippedCall, 0)
		return
	}
	p.brk.Done(o.Err, o.Duration)
}

// Throttle adapts a Google SRE adaptive throttle: Admit asks it with the
// call's time (AllowAt) and refuses a dropped call (ReasonThrottled, no
// retry delay); Finish records at the call's end whether the backend
// accepted it — ClassifyError says Success — or not (Failure). Calls
// ClassifyError ignores, and calls a later guard refused, are not
// recorded.
func Throttle(name string, t *throttle.Throttle) Guard {
	if t == nil {
		panic("grpcguard: Throttle: throttle must not be nil")
	}
	return &throttleGuard{name: name, t: t, classify: ClassifyError}
}

type throttleGuard struct {
	name     string
	t        *throttle.Throttle
	classify func(error) breaker.Outcome
}

func (g *throttleGuard) Name() string { return g.name }
func (g *throttleGuard) cost() int    { return costThrottle }
func (g *throttleGuard) timed() bool  { return true }

func (g *throttleGuard) Admit(c Call) Decision {
	if g.t.AllowAt(c.Now) {
		return Decision{}
	}
	return Refuse(ReasonThrottled, 0)
}

func (g *throttleGuard) Finish(c Call, _ Permit, o Outcome) {
	if o.Skipped {
		return
	}
	switch g.classify(o.Err) {
	case breaker.Success:
		g.t.RecordAt(c.Now.Add(o.Duration), true)
	case breaker.Failure:
		g.t.RecordAt(c.Now.Add(o.Duration), false)
	}
}

// holdOff is the hold-off state of one downstream target: the client
// refuses its calls locally until a server's retry delay has passed.
type holdOff struct {
	epoch time.Time
	until atomic.Int64 // end of the hold-off, ns since epoch; noHoldOff: none yet
}

// noHoldOff is holdOff.until before the first pushback.
const noHoldOff = math.MinInt64

// extend holds off until end at least.
func (h *holdOff) extend(end time.Time) {
	n := int64(end.Sub(h.epoch))
	for {
		u := h.until.Load()
		if n <= u || h.until.CompareAndSwap(u, n) {
			return
		}
	}
}

// left returns how long the hold-off still runs at now; 0 if it is over.
func (h *holdOff) left(now time.Time) time.Duration {
	u := h.until.Load()
	if u == noHoldOff {
		return 0
	}
	return max(0, time.Duration(u-int64(now.Sub(h.epoch))))
}

// holdGuard refuses calls to a target while it is held off.
type holdGuard struct{ h *holdOff }

func (g holdGuard) Name() string                 { return "holdoff" }
func (g holdGuard) cost() int                    { return costHoldOff }
func (g holdGuard) timed() bool                  { return false }
func (g holdGuard) Finish(Call, Permit, Outcome) {}

func (g holdGuard) Admit(c Call) Decision {
	if d := g.h.left(c.Now); d > 0 {
		return Refuse(ReasonHoldOff, d)
	}
	return Decision{}
}
