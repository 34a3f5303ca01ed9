package admission

// Cause is what made a guard refuse a call, in a form a machine reads: a
// transport turns it into a stable reason on the wire and in metrics
// (package decide: decide.ReasonOf). Each built-in guard sets the cause
// of each of its refusals; a guard of your own may set any of them
// (admission.RefuseFor). The zero Cause, CauseUnspecified, is that of a
// guard that says none, reported as plain overload.
type Cause uint8

// The causes of refusals. Their order is not part of the contract: match
// them by name.
const (
	// CauseUnspecified: the guard does not say.
	CauseUnspecified Cause = iota
	// CauseRunQueueFull: a run limit's queue for a turn to run cannot
	// take the call (runlimit).
	CauseRunQueueFull
	// CauseRunWaitExpired: the call's wait for a turn to run ran out
	// (runlimit).
	CauseRunWaitExpired
	// CauseDeadlineTooShort: the call cannot finish before its deadline
	// (deadline, runlimit); Decision.DeadlineTooShort is set too.
	CauseDeadlineTooShort
	// CauseCPUOverloaded: load is shed while the CPU is saturated
	// (loadshed).
	CauseCPUOverloaded
	// CauseMemoryOverloaded: load is shed while memory is short (memshed).
	CauseMemoryOverloaded
	// CauseRateLimited: a rate limit of the server, a method or the fleet
	// (ratelimit, redislimit).
	CauseRateLimited
	// CausePerKeyLimited: a limit of the call's key: its client, tenant
	// or downstream (ratelimit.NewKeyedGuard, redislimit's keyed guards).
	CausePerKeyLimited
	// CauseConcurrencyLimited: a cap on calls in flight (bulkhead).
	CauseConcurrencyLimited
	// CauseQueueDelay: calls waited too long before their handler started
	// (queuedelay).
	CauseQueueDelay
	// CauseTooManyStreams: a cap on open streams.
	CauseTooManyStreams
	// CauseCallerCanceled: the caller gave up while the call waited
	// (runlimit).
	CauseCallerCanceled
	// Causes is the number of causes, for arrays by cause.
	Causes
)

// Evidence is the evidence of overload a refusal was made on, and so the
// unit of its Decision.Value and Decision.Threshold. String gives its
// name, as metrics and the wire carry it. The zero value is EvidenceNone.
type Evidence uint8

// The kinds of evidence. Their order is not part of the contract: match
// them by name.
const (
	// EvidenceNone ("none"): the guard names none.
	EvidenceNone Evidence = iota
	// EvidenceLimit ("limit"): a configured bound was reached — a rate,
	// a cap, a key's share — which needs no evidence of overload. Value
	// and Threshold are the bound's figures where the guard knows them
	// (calls in flight against the cap, say).
	EvidenceLimit
	// EvidenceCPU ("cpu"): the CPU saturated; utilisation against the
	// threshold, as fractions of the CPU allowance.
	EvidenceCPU
	// EvidenceMemory ("memory"): memory short; utilisation against the
	// threshold, as fractions of the memory limit.
	EvidenceMemory
	// EvidenceOverrun ("overrun"): calls wait while calls run beyond a
	// run limit; calls running against the most the limit lets run.
	EvidenceOverrun
	// EvidenceStanding ("standing"): calls have waited for a turn without
	// a pause; how long they have against how long they must, in
	// milliseconds.
	EvidenceStanding
	// EvidenceLane ("lane"): a lane's queue holds more work than the
	// limit runs in an interval; its queued work against an interval's,
	// in milliseconds.
	EvidenceLane
	// EvidenceSpike ("spike"): calls ask for turns at least twice as fast
	// as turns end; the calls that asked over the run limit's last
	// interval and the current one against the most that is no spike.
	EvidenceSpike
	// EvidenceServiceTime ("service_time"): the call's time left is
	// shorter than the method's service time; Threshold is that time, in
	// milliseconds.
	EvidenceServiceTime
	// EvidenceQueueDelay ("queue_delay"): calls waited beyond a target
	// for a whole interval; the target, in milliseconds.
	EvidenceQueueDelay
	// EvidenceKinds is the number of kinds, for arrays by kind.
	EvidenceKinds
)

var evidenceNames = [EvidenceKinds]string{
	"none", "limit", "cpu", "memory", "overrun", "standing", "lane", "spike", "service_time", "queue_delay",
}

// String returns the evidence's name ("cpu", "standing"), or "none" for
// a value out of range.
func (e Evidence) String() string {
	if e < EvidenceKinds {
		return evidenceNames[e]
	}
	return "none"
}
