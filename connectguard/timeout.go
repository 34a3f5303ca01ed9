package connectguard

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// The headers that carry a call's timeout, by protocol.
const (
	// ConnectTimeoutHeader carries the timeout of a Connect-protocol call:
	// a positive number of milliseconds, at most 10 digits.
	ConnectTimeoutHeader = "Connect-Timeout-Ms"
	// GRPCTimeoutHeader carries the timeout of a gRPC or gRPC-Web call: at
	// most 8 digits and a unit, H (hours), M (minutes), S (seconds), m
	// (milliseconds), u (microseconds) or n (nanoseconds).
	GRPCTimeoutHeader = "Grpc-Timeout"
)

// errNoTimeout is the answer of a timeout parser for a header that sets
// no deadline: absent, or one the protocol reads as unbounded.
var errNoTimeout = errors.New("no timeout")

// errBadTimeout is the answer of a timeout parser for a malformed header:
// connect-go answers such a call INVALID_ARGUMENT before it reads its
// body, and the middleware leaves it to connect-go.
var errBadTimeout = errors.New("malformed timeout")

// maxConnectTimeoutDigits is the longest Connect-Timeout-Ms connect-go
// accepts.
const maxConnectTimeoutDigits = 10

// parseConnectTimeout reads a Connect-Timeout-Ms value as connect-go's
// Connect handler does, so that the middleware and the handler behind it
// see the same deadline: "" is no deadline; a value of more than 10
// bytes, one strconv.ParseInt rejects, or a negative one is malformed;
// otherwise that many milliseconds (0 is a deadline already past).
func parseConnectTimeout(v string) (time.Duration, error) {
	if v == "" {
		return 0, errNoTimeout
	}
	if len(v) > maxConnectTimeoutDigits {
		return 0, errBadTimeout
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 {
		return 0, errBadTimeout
	}
	// At most 10 digits: 9999999999ms fits a Duration 900 times over.
	return time.Duration(ms) * time.Millisecond, nil
}

// maxGRPCTimeoutValue is the largest value of a Grpc-Timeout (8 digits).
const maxGRPCTimeoutValue = 99999999

// parseGRPCTimeout reads a Grpc-Timeout value as connect-go's gRPC and
// gRPC-Web handlers do: "" is no deadline; a value whose last byte is
// not a unit (H M S m u n), whose number strconv.ParseInt rejects or is
// negative, or above 99999999, is malformed; a number of hours beyond
// what a time.Duration holds is no deadline (grpc-go treats it as
// unbounded too); otherwise the number times its unit.
func parseGRPCTimeout(v string) (time.Duration, error) {
	if v == "" {
		return 0, errNoTimeout
	}
	unit, ok := grpcTimeoutUnit(v[len(v)-1])
	if !ok {
		return 0, errBadTimeout
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 || n > maxGRPCTimeoutValue {
		return 0, errBadTimeout
	}
	if unit == time.Hour && n > math.MaxInt64/int64(time.Hour) {
		return 0, errNoTimeout
	}
	return time.Duration(n) * unit, nil
}

func grpcTimeoutUnit(b byte) (time.Duration, bool) {
	switch b {
	case 'H':
		return time.Hour, true
	case 'M':
		return time.Minute, true
	case 'S':
		return time.Second, true
	case 'm':
		return time.Millisecond, true
	case 'u':
		return time.Microsecond, true
	case 'n':
		return time.Nanosecond, true
	}
	return 0, false
}

// protocol is the RPC protocol of a request, as far as its timeout header
// goes.
type protocol uint8

const (
	protoConnect protocol = iota // Connect, unary or streaming (and anything else)
	protoGRPC                    // gRPC
	protoGRPCWeb                 // gRPC-Web
)

// protocolOf tells the protocol of r from its Content-Type, as connect-go
// does: application/grpc-web[+codec] is gRPC-Web, application/grpc[+codec]
// gRPC, and anything else is read as Connect (whose handler answers a
// type it does not take with 415 before any deadline matters).
func protocolOf(contentType string) protocol {
	ct := contentType
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.TrimSpace(ct)
	const grpc, web = "application/grpc", "application/grpc-web"
	switch {
	case hasPrefixFold(ct, web) && (len(ct) == len(web) || ct[len(web)] == '+'):
		return protoGRPCWeb
	case hasPrefixFold(ct, grpc) && (len(ct) == len(grpc) || ct[len(grpc)] == '+'):
		return protoGRPC
	}
	return protoConnect
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
