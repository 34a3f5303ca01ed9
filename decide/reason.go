package decide

import "github.com/levee-go/levee/admission"

// ErrorDomain is the domain of levee's google.rpc.ErrorInfo details.
const ErrorDomain = "levee"

// Reason is the stable, machine-readable reason of a refusal in
// UPPER_SNAKE_CASE (AIP-193): the reason of the google.rpc.ErrorInfo
// detail (domain ErrorDomain) a refusal carries on the wire, and the
// reason label of levee_refusals_total. There is one per cause (the
// package doc, "Refusal reasons", lists each with its cause), and the
// reasons are a contract: renaming one is a breaking change.
//
// See docs/why-refused.md for what each means to a caller and an operator.
//
// The zero Reason, "", is not a reason of any refusal: it is the Reason
// of the zero Refusal, which refuses nothing.
type Reason string

// The reasons of refusals.
const (
	ReasonRunQueueFull       Reason = "RUN_QUEUE_FULL"
	ReasonRunWaitExpired     Reason = "RUN_WAIT_EXPIRED"
	ReasonDeadlineTooShort   Reason = "DEADLINE_TOO_SHORT"
	ReasonCPUOverloaded      Reason = "CPU_OVERLOADED"
	ReasonMemoryOverloaded   Reason = "MEMORY_OVERLOADED"
	ReasonRateLimited        Reason = "RATE_LIMITED"
	ReasonPerKeyLimited      Reason = "PER_KEY_LIMITED"
	ReasonConcurrencyLimited Reason = "CONCURRENCY_LIMITED"
	ReasonQueueDelayExceeded Reason = "QUEUE_DELAY_EXCEEDED"
	ReasonTooManyStreams     Reason = "TOO_MANY_STREAMS"
	ReasonCallerCanceled     Reason = "CALLER_CANCELED"
	ReasonSustainedOverload  Reason = "SUSTAINED_OVERLOAD"
	ReasonOverloaded         Reason = "OVERLOADED"
)

// reasons maps each admission.Cause to its Reason.
var reasons = [admission.Causes]Reason{
	admission.CauseUnspecified:        ReasonOverloaded,
	admission.CauseRunQueueFull:       ReasonRunQueueFull,
	admission.CauseRunWaitExpired:     ReasonRunWaitExpired,
	admission.CauseDeadlineTooShort:   ReasonDeadlineTooShort,
	admission.CauseCPUOverloaded:      ReasonCPUOverloaded,
	admission.CauseMemoryOverloaded:   ReasonMemoryOverloaded,
	admission.CauseRateLimited:        ReasonRateLimited,
	admission.CausePerKeyLimited:      ReasonPerKeyLimited,
	admission.CauseConcurrencyLimited: ReasonConcurrencyLimited,
	admission.CauseQueueDelay:         ReasonQueueDelayExceeded,
	admission.CauseTooManyStreams:     ReasonTooManyStreams,
	admission.CauseCallerCanceled:     ReasonCallerCanceled,
}

// Reasons lists every reason, in the order of the table above.
var Reasons = []Reason{
	ReasonRunQueueFull, ReasonRunWaitExpired, ReasonDeadlineTooShort, ReasonCPUOverloaded,
	ReasonMemoryOverloaded, ReasonRateLimited, ReasonPerKeyLimited, ReasonConcurrencyLimited,
	ReasonQueueDelayExceeded, ReasonTooManyStreams, ReasonCallerCanceled, ReasonSustainedOverload,
	ReasonOverloaded,
}

// ReasonOf returns the reason of a refusal for cause: ReasonOverloaded for
// CauseUnspecified or a cause out of range. A refusal whose
// admission.Decision says DeadlineTooShort has ReasonDeadlineTooShort
// whatever its cause (NewRefusal).
func ReasonOf(cause admission.Cause) Reason {
	if cause < admission.Causes {
		return reasons[cause]
	}
	return ReasonOverloaded
}

// knownReason reports whether r is one of Reasons.
func knownReason(r Reason) bool {
	for _, k := range Reasons {
		if r == k {
			return true
		}
	}
	return false
}
