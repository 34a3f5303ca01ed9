package runlimit

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/runlimit/internal/learn"
)

// MoveCause says why the learner moved the limit (docs/runlimit-learner.md
// describes each move). The zero MoveCause, "", is no cause: a Limiter
// records a move it names no cause for as MoveOther, never as "".
type MoveCause string

// The causes of the limit's moves.
const (
	// MoveGrow: the limit was reached with no queue inside the server
	// (TCP Vegas): doubled in slow start, then grown by √limit; or, after
	// an interval with calls beyond it, grown to the calls its ended
	// turns kept running at once at their baselines, at most doubled.
	MoveGrow MoveCause = "grow"
	// MoveShrink: service times stretched as by a queue above the Vegas
	// band: the limit shrank by half the queue above it.
	MoveShrink MoveCause = "shrink"
	// MoveProbeStart: a probe lowered the limit to measure service times
	// with less contention (Move.Probe names its kind).
	MoveProbeStart MoveCause = "probe_start"
	// MoveProbeKept: a probe ended keeping its cut.
	MoveProbeKept MoveCause = "probe_kept"
	// MoveProbeUndone: a probe ended with the limit back where it was.
	MoveProbeUndone MoveCause = "probe_undone"
	// MoveProbeAbandoned: a probe measured too few calls in its time:
	// the limit ended a tenth lower than before it.
	MoveProbeAbandoned MoveCause = "probe_abandoned"
	// MoveProbeEmpty: a probe measured no call of a flow with a baseline:
	// the limit went back.
	MoveProbeEmpty MoveCause = "probe_empty"
	// MoveOther: a move the learner names no cause for.
	MoveOther MoveCause = "other"
)

// Move is one move of the limit, copied out by Limiter.Moves or given to
// OnMove's function: a plain value with no lock of its own, safe to keep
// and to read from any goroutine. The zero Move is no move (0 to 0 at the
// zero time, no cause), which a Limiter never reports: its moves change
// the limit.
type Move struct {
	At       time.Time // when the limit moved, on the Limiter's clock
	From, To int       // the limit before and after
	Cause    MoveCause
	Probe    string // a probe's move: "baseline", "cpu" or "lag"; else ""
}

// MaxMoves is how many of its last moves a Limiter remembers (Moves).
const MaxMoves = 64

// moves are the Limiter's last moves, in a ring, and the function told of
// each (OnMove): written under upd, told once it is unlocked.
type moves struct {
	mu   sync.Mutex
	ring [MaxMoves]moveRec
	seq  atomic.Uint64 // moves recorded since New; the next goes to ring[seq%MaxMoves]
	told atomic.Uint64 // moves told to fn (or skipped, without one)
	fn   atomic.Pointer[func(Move)]
}

type moveRec struct {
	at       int64 // ns since the Limiter's epoch
	from, to int64
	cause    MoveCause
	probe    learn.Kind
}

// probeNames name the probes as Move.Probe does.
var probeNames = [learn.Kinds]string{learn.BaselineProbe: "baseline", learn.CPUProbe: "cpu", learn.LagProbe: "lag"}

// noteMove records that the limit was set from old to n for cause (of a
// probe of kind probe; MoveOther if empty), unless n is old. Needs upd.
func (l *Limiter) noteMove(old, n int64, cause MoveCause, probe learn.Kind) {
	ms := &l.moves
	if cause == "" {
		cause = MoveOther
	}
	if old == n {
		return
	}
	ms.mu.Lock()
	seq := ms.seq.Load()
	ms.ring[seq%MaxMoves] = moveRec{at: l.nanos(l.o.now()), from: old, to: n, cause: cause, probe: probe}
	ms.seq.Store(seq + 1)
	ms.mu.Unlock()
}

// tellMoves tells OnMove's function of the moves still remembered not
// told yet. It runs with no lock of the Limiter held.
func (l *Limiter) tellMoves() {
	ms := &l.moves
	for {
		told, seq := ms.told.Load(), ms.seq.Load()
		if told >= seq {
			return
		}
		if !ms.told.CompareAndSwap(told, seq) {
			continue
		}
		fn := ms.fn.Load()
		if fn == nil {
			return
		}
		for i := max(told, seq-min(seq, MaxMoves)); i < seq; i++ {
			if m, ok := l.moveAt(i); ok {
				(*fn)(m)
			}
		}
		return
	}
}

// moveAt returns the move numbered i, if it is still remembered.
func (l *Limiter) moveAt(i uint64) (Move, bool) {
	ms := &l.moves
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if seq := ms.seq.Load(); i >= seq || seq-i > MaxMoves {
		return Move{}, false
	}
	r := ms.ring[i%MaxMoves]
	m := Move{At: l.epoch.Add(time.Duration(r.at)), From: int(r.from), To: int(r.to), Cause: r.cause}
	if r.probe != learn.NoProbe {
		m.Probe = probeNames[r.probe]
	}
	return m, true
}

// Moves returns the Limiter's last moves of the limit, oldest first, at
// most MaxMoves. It allocates; call it from a debug page or a test, not
// per call.
func (l *Limiter) Moves() []Move {
	seq := l.moves.seq.Load()
	out := make([]Move, 0, min(seq, MaxMoves))
	for i := seq - min(seq, MaxMoves); i < seq; i++ {
		if m, ok := l.moveAt(i); ok {
			out = append(out, m)
		}
	}
	return out
}

// OnMove sets fn to be told of each move of the limit from now on,
// replacing the function set before (nil: none). fn runs, holding no
// lock, on the goroutine of the call that closed the learner's interval:
// it must return quickly. It is safe for concurrent use.
func (l *Limiter) OnMove(fn func(Move)) {
	if fn == nil {
		l.moves.fn.Store(nil)
		return
	}
	l.moves.fn.Store(&fn)
}
