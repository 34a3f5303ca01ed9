package runlimit

import (
	"errors"
	"sync/atomic"
	"time"
)

// Streams (see the package doc): a server-streaming call holds its turn
// for at most streamHold; a flow whose streams stay open (streamLongAt of
// them, net of the short ones) takes no turn for them. A stream's wait
// that runs out without evidence of overload runs without a turn
// (errNoTurn), not beyond the limit: turns held by streams waiting for
// events must not count as an overrun, which is evidence of overload.
//
// errNoTurn: a stream's wait for a turn ran out without evidence of
// overload; it runs without a turn.
// errNoTurn: a stream's wait for a turn ran out without evidence of
// overload; it runs without a turn.
var errNoTurn = errors.New("runlimit: a stream runs without a turn")

// streamHoldMul: a stream holds its turn for at most this many of its
// flow's queue targets.
const streamHoldMul = 2

// streamLongAt is the score (streams that stayed open past their hold,
// less those that ended within it, between -streamLongMax and
// streamLongMax) at which a flow's streams take no turn.
const (
	streamLongAt  = 4
	streamLongMax = 8
)

// streamHold is how long a stream of f holds its turn at most.
func (f *Flow) streamHold() time.Duration { return streamHoldMul * f.QueueTarget() }

// streamsStayOpen reports whether f's streams stay open past their hold:
// they take no turn.
func (f *Flow) streamsStayOpen() bool { return f.streamScore.Load() >= streamLongAt }

// noteStream counts a stream of f that stayed open past its hold (long)
// or ended within it.
func (f *Flow) noteStream(long bool) {
	for {
		old := f.streamScore.Load()
		nv := old - 1
		if long {
			nv = old + 1
		}
		if nv > streamLongMax || nv < -streamLongMax || f.streamScore.CompareAndSwap(old, nv) {
			return
		}
	}
}

// streamTurn is the turn of a server-streaming call: given back when the
// stream ends (finish) or when its hold runs out (expire), whichever
// comes first.
type streamTurn struct {
	t     Ticket
	stop  func() bool // stops the hold's timer; set after it is armed: read only by finish
	state atomic.Bool // the turn was given back
}

// holdStream makes t a stream's turn, given back after f's hold at the
// latest.
func holdStream(t Ticket) *streamTurn {
	t.stream = true
	st := &streamTurn{t: t}
	st.stop = t.f.l.afterFunc(t.f.streamHold(), st.expire)
	return st
}

// expire gives the turn back at the end of its hold: the stream stayed
// open. It counts toward its flow's streams staying open only without
// evidence of overload: in a spike a short stream may outlast its hold.
func (st *streamTurn) expire() {
	if !st.state.CompareAndSwap(false, true) {
		return
	}
	f := st.t.f
	st.t.Release()
	if !f.l.overloadedAt(f.l.nanos(f.l.o.now())) {
		f.noteStream(true)
	}
}

// finish ends the stream: its turn, if it still holds it, is given back
// and the stream's time from its turn is learned as a service time
// (unless learn is false: it failed for a reason of its own), by flow
// nf if not nil (the stream's name got a flow of its own as it ended:
// see NewGuard); it counts as a stream that ended within its hold.
func (st *streamTurn) finish(nf *Flow, learn, overload bool) {
	if !st.state.CompareAndSwap(false, true) {
		return
	}
	st.stop()
	if nf != nil {
		st.t.f = nf // expire, which lost the race, reads no more of st
	}
	f := st.t.f
	f.noteStream(false)
	if !learn {
		st.t.Release()
		return
	}
	st.t.Done(f.l.o.now(), overload)
}

// finishUnturned counts a stream of f that ran without a turn, started
// at start (ns since the Limiter's epoch) and ended now: ended within
// its hold, it tells that f's streams may no longer stay open.
func (f *Flow) finishUnturned(start int64) {
	if f.l.nanos(f.l.o.now())-start < int64(f.streamHold()) {
		f.noteStream(false)
	}
}
