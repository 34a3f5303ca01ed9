package runlimit

import (
	"errors"
	"sync/atomic"
	"time"
)

// errNoTurn: a stream's wait ran out without evidence of overload; it
// runs without a turn, not beyond the limit, so that it is no overrun.
var errNoTurn = errors.New("runlimit: a stream runs without a turn")

const (
	streamHoldMul = 2 // a stream holds its turn for at most this many queue targets
	// At a score (Flow.streamScore, within ±streamLongMax) of
	// streamLongAt a flow's streams take no turn.
	streamLongAt  = 4
	streamLongMax = 8
)

// streamHold is how long a stream of f holds its turn at most.
func (f *Flow) streamHold() time.Duration { return streamHoldMul * f.QueueTarget() }

// streamsStayOpen reports whether f's streams outlive their hold.
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
// stream ends (finish) or its hold runs out (expire), whichever is first.
type streamTurn struct {
	t     Ticket
	stop  func() bool // stops the hold's timer; read only by finish
	state atomic.Bool // the turn was given back
}

// holdStream makes t a stream's turn, given back after its hold.
func holdStream(t Ticket) *streamTurn {
	t.flags |= streamFlag
	st := &streamTurn{t: t}
	st.stop = t.f.l.afterFunc(t.f.streamHold(), st.expire)
	return st
}

// expire gives the turn back at the end of its hold, counting the stream
// as staying open only without evidence of overload (in a spike a short
// stream may outlast its hold).
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

// finish gives the turn back within its hold and, if learn, teaches its
// time, to nf if not nil (the name got a flow as it ended).
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

// finishUnturned counts a stream that ran without a turn from start if it
// ended within its hold.
func (f *Flow) finishUnturned(start int64) {
	if f.l.nanos(f.l.o.now())-start < int64(f.streamHold()) {
		f.noteStream(false)
	}
}
