package grpcguard

import (
	"sync"
	"time"
)

// What a refusal in the tap leaves behind.
//
// grpc-go creates a stream's deadline context before it runs the tap, and
// its tap-refusal branch (internal/transport/http2_server.go,
// operateHeaders, the inTapHandle error path) returns without calling
// s.cancel(), unlike the transport's other early returns. Each call
// refused in the tap thus leaves its context's timer armed until the
// caller's deadline: about 300 bytes of heap (the timer, the context and
// what it holds), and a goroutine for a moment when the timer fires. A
// client that sends thousands of calls a second with 30 s deadlines into
// a refusing tap pins tens of megabytes (docs/memory.md has the
// measurement). The upstream fix is one line, s.cancel() before that
// return. Until then a Server counts them: TapLeftovers.
//
// Under sustained overload (see SustainedAfter) the tap lets the calls
// it would refuse through to the interceptor, which ends the stream and
// its timer, and so it does at all times with a call whose deadline is
// beyond TapRefusalHorizon; so leftovers accrue for the first
// SustainedAfter of each overload and from refusals of deadlines that
// cannot be met, each for at most TapRefusalHorizon.

// leftoverSlots is the span, in seconds, over which deadlines are told
// apart; a later deadline is counted as pending until the last slot.
const leftoverSlots = 128

// leftovers counts tap refusals by the second their deadline passes. The
// zero value is empty and ready. It takes a lock on the refusal path
// only.
type leftovers struct {
	mu    sync.Mutex
	sec   [leftoverSlots]int64 // the unix second slot i counts, or 0
	n     [leftoverSlots]int64
	total uint64 // tap refusals with a deadline
}

// note counts a tap refusal at now of a call with deadline dl (zero: no
// deadline, nothing left behind).
func (l *leftovers) note(now, dl time.Time) {
	if dl.IsZero() {
		return
	}
	s := now.Unix()
	d := dl.Unix() + 1 // the timer fires within this second
	d = min(max(d, s+1), s+leftoverSlots-1)
	i := d % leftoverSlots
	l.mu.Lock()
	if l.sec[i] != d {
		l.sec[i], l.n[i] = d, 0
	}
	l.n[i]++
	l.total++
	l.mu.Unlock()
}

// pending returns how many counted refusals' deadlines have not passed
// at now, and how many refusals were counted in all.
func (l *leftovers) pending(now time.Time) (n int64, total uint64) {
	s := now.Unix()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.sec {
		if l.sec[i] > s {
			n += l.n[i]
		}
	}
	return n, l.total
}

// TapLeftovers returns how many calls this Server refused in the tap
// whose deadline has not passed at now — each still holds a deadline
// timer and its context in grpc-go (see the comment on leftovers in the
// source, and docs/memory.md) — and how many tap refusals of calls with
// a deadline it made in all. Deadlines more than two minutes out count as
// pending for two minutes only. It takes a lock; call it at scrape time.
func (s *Server) TapLeftovers(now time.Time) (pending int64, total uint64) {
	return s.tapLeft.pending(now)
}
