package decide

import "github.com/levee-go/levee/admission"

// ErrorDomain is the domain of levee's google.rpc.ErrorInfo details.
const ErrorDomain = "levee"

// Reason is the stable, machine-readable reason of a refusal in
// UPPER_SNAKE_CASE (AIP-193): the reason of the google.rpc.ErrorInfo
// detail (domain ErrorDomain) a refusal carries on the wire, and the
// reason label of levee_refusals_total. There is one per cause, and the
// reasons are a contract: renaming one is a breaking change.
//
//	RUN_QUEUE_FULL        the run limit's queue for a turn cannot take the call (runlimit)
//	RUN_WAIT_EXPIRED      the call's wait for a turn to run ran out (runlimit)
//	DEADLINE_TOO_SHORT    the call cannot finish before its deadline (deadline, runlimit); DEADLINE_EXCEEDED
//	CPU_OVERLOADED        load shed while the CPU is saturated (loadshed)
//	MEMORY_OVERLOADED     load shed while memory is short (memshed)
//	RATE_LIMITED          a rate limit of the server, a method or the fleet (ratelimit, redislimit)
//	PER_KEY_LIMITED       a limit of the call's key: its client, tenant or downstream (per-key guards)
//	CONCURRENCY_LIMITED   a cap on calls in flight (bulkhead)
//	QUEUE_DELAY_EXCEEDED  calls waited too long before their handler started (queuedelay)
//	TOO_MANY_STREAMS      a cap on open streams
//	CALLER_CANCELED       the caller gave up while the call waited
//	SUSTAINED_OVERLOAD    any of the above while refusals have gone on for SustainedAfter: do not retry
//	OVERLOADED            a guard that names no cause (one of your own)
//
// See docs/why-refused.md for what each means to a caller and an operator.
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
