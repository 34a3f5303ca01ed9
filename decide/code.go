package decide

import (
	"net/http"
	"strconv"
)

// Code is the status code of a refusal. The values are gRPC's
// (google.rpc.Code), so a gRPC front-end converts one by a cast
// (codes.Code(c)); HTTPStatus gives the HTTP equivalent. The zero Code
// is OK, which no refusal carries: a Rule with a zero Code refuses with
// ResourceExhausted.
type Code uint32

// The codes of refusals.
const (
	OK Code = 0
	// DeadlineExceeded: the call cannot finish before its deadline
	// (admission.Decision.DeadlineTooShort), whatever the rule's code.
	DeadlineExceeded Code = 4
	// ResourceExhausted: refused for lack of capacity; the default code
	// of a rule.
	ResourceExhausted Code = 8
	// Unavailable: refused for lack of capacity, for services whose
	// clients retry UNAVAILABLE but not RESOURCE_EXHAUSTED.
	Unavailable Code = 14
)

// String returns the code's name as google.rpc.Code spells it
// ("RESOURCE_EXHAUSTED", "NOT_FOUND"), or "CODE(n)" beyond gRPC's codes.
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "CODE(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// codeNames are gRPC's codes' names, by value.
var codeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
	"INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

// HTTPStatus returns the HTTP status of a refusal with code c, as the
// Connect protocol maps them: 429 Too Many Requests for
// ResourceExhausted, 503 Service Unavailable for Unavailable, 504 Gateway
// Timeout for DeadlineExceeded, 200 for OK and 500 for any other.
func (c Code) HTTPStatus() int {
	switch c {
	case OK:
		return http.StatusOK
	case DeadlineExceeded:
		return http.StatusGatewayTimeout
	case ResourceExhausted:
		return http.StatusTooManyRequests
	case Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Overload reports whether an answer with code c says its server was
// overloaded — it ran out of time (DeadlineExceeded) or refused for lack
// of capacity (ResourceExhausted, Unavailable) — rather than an error of
// the application. Front-ends set admission.Outcome.Overload with it, so
// that only overload teaches a guard to lower a limit.
func (c Code) Overload() bool {
	return c == DeadlineExceeded || c == ResourceExhausted || c == Unavailable
}
