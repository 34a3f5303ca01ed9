package decide

import (
	"time"

	"github.com/levee-go/levee/admission"
)

// Refusal is what a refused call is told, as a value a front-end renders
// in its protocol (grpcguard: a status with RetryInfo and the pushback
// trailer; HTTP: a status and Retry-After). Build one with NewRefusal or
// Compiled.Refusal. The zero Refusal refuses nothing (its Code is OK).
// A Refusal is a plain value, built per refused call and returned by
// value; it has no synchronisation of its own, and may be copied and read
// from any goroutine.
type Refusal struct {
	// Code is the status: the rule's code, or DeadlineExceeded for a call
	// that cannot finish before its deadline.
	Code Code
	// Guard is the name of the refusing guard.
	Guard string
	// Reason is the refusal's stable reason (see Reason): the guard's
	// (Cause), or ReasonSustainedOverload once refusals are sustained
	// (Sustained).
	Reason Reason
	// Cause is the refusing guard's reason, from its
	// admission.Decision.Cause; it differs from Reason only under
	// sustained overload.
	Cause Reason
	// Evidence is the evidence of overload the guard refused on, and
	// Value and Threshold its measure and the level it was judged
	// against, in the unit Evidence names (0: the guard does not say).
	Evidence         admission.Evidence
	Value, Threshold float32
	// Message is the guard's reason in a few words
	// (admission.Decision.Reason): "levee: " + Guard + ": " + Message is
	// the message a front-end shows.
	Message string
	// RetryAfter is the delay after which a retry may succeed: 0 when
	// unknown, admission.Never when no wait helps.
	RetryAfter time.Duration
	// PerKey marks a refusal of the call's key (Key) rather than of the
	// whole method; gRPC adds a google.rpc.QuotaFailure detail naming it.
	PerKey bool
	// Key is the refused key when PerKey; it may be any bytes a client
	// sent (a front-end makes it valid UTF-8 where it must).
	Key string
	// NoRetry tells the client not to retry (a gRPC pushback of -1): the
	// deadline cannot be met, no wait helps, or refusals are sustained
	// (a front-end sets it then; see SustainedAfter).
	NoRetry bool
}

// NewRefusal returns the refusal by the guard named guard of a call of a
// rule with code code (zero: ResourceExhausted), decided d, whose key is
// key. It allocates nothing.
func NewRefusal(code Code, guard string, d admission.Decision, key string) Refusal {
	if code == OK {
		code = ResourceExhausted
	}
	// A guard of one's own may name the cause without the flag
	// (admission.RefuseFor): either says the deadline cannot be met.
	tooShort := d.DeadlineTooShort || d.Cause == admission.CauseDeadlineTooShort
	if tooShort {
		code = DeadlineExceeded
	}
	reason := ReasonOf(d.Cause)
	if tooShort {
		reason = ReasonDeadlineTooShort
	}
	if d.Evidence >= admission.EvidenceKinds {
		d.Evidence = admission.EvidenceNone // a guard's own value, out of range: none named
	}
	r := Refusal{
		Code:       code,
		Guard:      guard,
		Reason:     reason,
		Cause:      reason,
		Evidence:   d.Evidence,
		Value:      d.Value,
		Threshold:  d.Threshold,
		Message:    d.Reason,
		RetryAfter: d.RetryAfter,
		PerKey:     d.PerKey,
		NoRetry:    tooShort || d.RetryAfter == admission.Never,
	}
	if d.PerKey {
		r.Key = key
	}
	return r
}

// Refusal returns the refusal of a call by guard i of r's chain (the
// index Admit, Enter or Start returned), decided d, whose key is key.
func (r *Compiled) Refusal(i int, d admission.Decision, key string) Refusal {
	return NewRefusal(r.code, r.Guard(i).Name(), d, key)
}

// Sustained returns r as a refusal under sustained overload (see
// SustainedAfter): it tells its client not to retry, and its Reason is
// ReasonSustainedOverload (its Cause stays the guard's). A refusal for a
// deadline keeps its reason.
func (r Refusal) Sustained() Refusal {
	r.NoRetry = true
	if r.Reason != ReasonDeadlineTooShort {
		r.Reason = ReasonSustainedOverload
	}
	return r
}
