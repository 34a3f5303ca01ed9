package grpcguard

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// retryHint is what a failed attempt's trailer says of a retry.
type retryHint struct {
	pushback time.Duration
	// state: hintNone (no trailer), hintDelay (pushback holds a delay),
	// hintStop (negative or malformed: do not retry).
	state uint8
}

const (
	hintNone = iota
	hintDelay
	hintStop
)

// read fills h from the pushback trailer md (nil: none).
func (h *retryHint) read(md *metadata.MD) {
	*h = retryHint{}
	if md == nil {
		return
	}
	v := (*md)[PushbackTrailer]
	if len(v) == 0 {
		return
	}
	ms, err := strconv.ParseInt(v[0], 10, 64)
	switch {
	case err != nil || ms < 0:
		h.state = hintStop // gRFC A6: a negative or malformed pushback means do not retry
	case ms > int64(math.MaxInt64/time.Millisecond):
		h.state, h.pushback = hintDelay, math.MaxInt64
	default:
		h.state, h.pushback = hintDelay, time.Duration(ms)*time.Millisecond
	}
}

// retrying runs a unary call of up to c.o.attempts attempts; see
// WithRetries.
func (c *Client) retrying(ctx context.Context, e *clientEntry, target, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	t := e.target
	var hint retryHint
	sent, err := c.attempt(ctx, e, target, method, req, reply, cc, invoker, opts, t.budget, &hint)
	if !sent {
		return err
	}
	for n := 1; err != nil && n < c.o.attempts; n++ {
		d, ok := c.retryDelay(err, &hint, n)
		if !ok {
			return err
		}
		now := c.now()
		d = max(min(d, c.retryWaitCap()), t.hold.Left(now))
		if dl, has := ctx.Deadline(); has && dl.Sub(now) <= d {
			return err // the retry could not finish in time
		}
		if t.budget != nil && !t.budget.TryRetryAt(now) {
			return err
		}
		if d > 0 && !c.wait(ctx, d) {
			return err
		}
		sent, next := c.attempt(ctx, e, target, method, req, reply, cc, invoker, opts, nil, &hint)
		if !sent {
			return err // a guard refused the retry: the server's answer stands
		}
		err = next
	}
	return err
}

// retryWaitCap is the longest a retry waits for a server's delay: the
// hold-off's cap (WithMaxHoldOff), DefaultMaxHoldOff with holding off
// disabled. A server's pushback of a day must not hold a call for a day.
func (c *Client) retryWaitCap() time.Duration {
	if c.o.maxHoldOff > 0 {
		return c.o.maxHoldOff
	}
	return DefaultMaxHoldOff
}

// retryDelay says whether the n-th attempt's error err may be retried,
// and after how long.
func (c *Client) retryDelay(err error, hint *retryHint, n int) (time.Duration, bool) {
	if !retryable(err) || hint.state == hintStop {
		return 0, false
	}
	if hint.state == hintDelay {
		return hint.pushback, true
	}
	if d, ok := RetryDelay(err); ok {
		return max(d, 0), true
	}
	ceil := c.o.maxBackoff
	if n < 62 {
		ceil = min(ceil, c.o.backoff<<(n-1))
		if ceil <= 0 { // overflowed
			ceil = c.o.maxBackoff
		}
	}
	return time.Duration(c.jitter() * float64(ceil)), true
}

// retryable reports whether err is an overload refusal a server answered
// and did not forbid retrying: RESOURCE_EXHAUSTED (not a message-size
// error) or UNAVAILABLE, not refused in this process, and not the answer
// of a server whose downstream is overloaded.
func retryable(err error) bool {
	if isLocalRefusal(err) {
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.ResourceExhausted:
		if strings.Contains(st.Message(), "larger than max") {
			return false
		}
	case codes.Unavailable:
	default:
		return false
	}
	return !IsUpstreamOverloaded(err)
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
