package decide

import (
	"slices"
	"sync"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/overload"
)

// Refusals that standard clients obey.
//
// grpc-go and grpcio clients with a retry policy act on the
// grpc-retry-pushback-ms trailer only: a refusal without it is retried
// after the policy's backoff, so a client with maxAttempts 3 sends up to
// three attempts per call into an overloaded server. A front-end may be
// unable to set that trailer where refusing is cheapest (grpc-go's tap).
// So while refusals are occasional the front-end refuses there and the
// call carries its delay in RetryInfo only; once they are sustained — the
// server has refused calls without a pause of SustainedGap for
// SustainedAfter (Engine.NoteRefusal) — a call it would refuse there from
// a connection that retries (Engine.Retrying) is let through to where a
// trailer can be set, and refused with the same status and RetryInfo and
// a pushback of -1: "do not retry" (Refusal.NoRetry). Refusals for a
// deadline that cannot be met are never let through: clients do not retry
// DEADLINE_EXCEEDED by default, and -1 is what they carry anyway.
const (
	// SustainedAfter (500 ms) is how long refusals must go on before they
	// tell clients not to retry.
	SustainedAfter = overload.SustainedAfter
	// SustainedGap (250 ms) is the pause in refusals that ends sustained
	// overload.
	SustainedGap = overload.SustainedGap
)

// sustained tracks whether refusals are sustained: the rule is
// overload.Run's. Its zero value has seen no refusal. It is lock-free.
type sustained struct{ run overload.Run }

// refused notes a refusal decided at now and reports whether refusals
// have been sustained, so that this one should tell its client not to
// retry. A refusal for a deadline is noted but never reported. A refusal
// of one key (Decision.PerKey: a client beyond its own limit) is neither:
// it says nothing of the server's load, and its retry delay is when the
// key's limit lets it in.
func (s *sustained) refused(now time.Time, d admission.Decision) bool {
	if d.PerKey {
		return false
	}
	return s.run.Note(now.UnixNano()).Holds && !d.DeadlineTooShort && d.Cause != admission.CauseDeadlineTooShort
}

// maxRetrying bounds the connections remembered as retrying; beyond it
// the oldest half is forgotten.
const maxRetrying = 4096

// retrying remembers the connections (by peer address) that sent a retry
// attempt. It is touched on refusals only. Its zero value is empty.
type retrying struct {
	mu   sync.Mutex
	seen map[string]int64 // peer address → when last seen retrying, unix nanos
}

// note reports whether the connection of a call refused at now retries:
// it sent a retry attempt now (PreviousAttemptsHeader) or before.
func (r *retrying) note(f Facts, now time.Time) bool {
	retry := f.PreviousAttempts() > 0
	a := f.Peer()
	if a == nil {
		return retry
	}
	key := a.String()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !retry {
		_, ok := r.seen[key]
		return ok
	}
	if r.seen == nil {
		r.seen = map[string]int64{}
	}
	if len(r.seen) >= maxRetrying {
		r.forgetOldest()
	}
	r.seen[key] = now.UnixNano()
	return true
}

// forgetOldest drops the older half of the remembered connections. Needs mu.
func (r *retrying) forgetOldest() {
	ts := make([]int64, 0, len(r.seen))
	for _, t := range r.seen {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	cut := ts[len(ts)/2]
	for k, t := range r.seen {
		if t < cut {
			delete(r.seen, k)
		}
	}
	if len(r.seen) >= maxRetrying { // equal times: forget them all
		clear(r.seen)
	}
}
