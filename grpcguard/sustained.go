package grpcguard

import (
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/admission"
)

// Refusals that standard clients obey.
//
// grpc-go and grpcio clients with a retry policy act on the
// grpc-retry-pushback-ms trailer only: a refusal without it is retried
// after the policy's backoff, so a client with maxAttempts 3 sends up to
// three attempts per call into an overloaded server. grpc-go's tap can set
// no trailer. So while refusals are occasional the tap refuses (the
// cheapest place: no stream, no goroutine) and the call carries its delay
// in RetryInfo only; once they are sustained — the server has refused
// calls without a pause of SustainedGap for SustainedAfter — a call the tap
// would refuse is let through to the interceptor, which refuses it with
// the same status and RetryInfo and a pushback of -1: "do not retry". The
// interceptor's own refusals carry -1 then too. Refusals for a deadline
// that cannot be met are never let through: clients do not retry
// DEADLINE_EXCEEDED by default, and -1 is what they carry anyway.
const (
	// SustainedAfter is how long refusals must go on before they tell
	// clients not to retry.
	SustainedAfter = 500 * time.Millisecond
	// SustainedGap is the pause in refusals that ends sustained overload.
	SustainedGap = 250 * time.Millisecond
)

// sustained tracks whether refusals are sustained. Its zero value has
// seen no refusal. It is lock-free; concurrent refusals may move the run's
// start by a moment, which changes nothing that matters.
type sustained struct {
	first atomic.Int64 // start of the current run of refusals, unix nanos
	last  atomic.Int64 // the latest refusal, unix nanos
}

// refused notes a refusal decided at now and reports whether refusals
// have been sustained, so that this one should tell its client not to
// retry. A refusal for a deadline is noted but never reported.
func (s *sustained) refused(now time.Time, d admission.Decision) bool {
	t := now.UnixNano()
	last := s.last.Swap(t)
	if last == 0 || t-last > int64(SustainedGap) {
		s.first.Store(t)
		return false
	}
	return !d.DeadlineTooShort && t-s.first.Load() >= int64(SustainedAfter)
}

// noRetry is the pushback of a refusal under sustained overload.
func noRetry(d admission.Decision) admission.Decision {
	d.RetryAfter = admission.Never
	return d
}
