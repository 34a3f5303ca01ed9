package decide

import (
	"cmp"
	"hash/maphash"
	"slices"
	"sync/atomic"

	"github.com/levee-go/levee/admission"
)

// RefusalCount is how many refusals an Engine recorded (Engine.Refused)
// of one guard, for one reason, on one evidence of overload: a series of
// levee_refusals_total. It is a plain value copied out of the engine's
// counters; the zero value is no series at all (no guard, no reason, no
// count). Like any value it may be read from several goroutines, not
// written from several at once.
type RefusalCount struct {
	Guard    string
	Reason   Reason
	Evidence admission.Evidence
	Count    uint64
}

// OtherGuards is the guard name under which an Engine counts the
// refusals of guards beyond MaxRefusalSeries series, so that a process
// whose guards have names without end keeps a bounded label set.
const OtherGuards = "*"

// MaxRefusalSeries is how many (guard, reason, evidence) series an
// Engine counts apart; beyond it, refusals are counted under
// OtherGuards with their reason and evidence.
const MaxRefusalSeries = 512

// refusalSlots is the size of the counters' table: a power of two with
// room for MaxRefusalSeries series and every (OtherGuards, reason,
// evidence) series besides, at most half full.
const refusalSlots = 2048

// refusalCounts counts refusals by (guard, reason, evidence) in an
// open-addressed table whose entries are made once and never removed,
// so that counting is a few loads and an atomic add. Its zero value is
// ready.
type refusalCounts struct {
	seed  maphash.Seed // set by New
	named atomic.Int64 // series of named guards (not OtherGuards)
	slots [refusalSlots]atomic.Pointer[refusalCounter]
}

type refusalCounter struct {
	guard    string
	reason   Reason
	evidence admission.Evidence
	n        atomic.Uint64
}

// hash is where the series (guard, reason, evidence) starts its probe.
func (t *refusalCounts) hash(guard string, reason Reason, ev admission.Evidence) uint64 {
	h := maphash.String(t.seed, guard)
	h ^= maphash.String(t.seed, string(reason)) * 0x9e3779b97f4a7c15
	h ^= uint64(ev) * 0xbf58476d1ce4e5b9
	return h ^ h>>31
}

// add counts one refusal. A reason that is none of Reasons counts as
// ReasonOverloaded, and evidence out of range as none: a Refusal made by
// hand (Engine.Refused) must not add series beyond the table's bound.
func (t *refusalCounts) add(guard string, reason Reason, ev admission.Evidence) {
	if ev >= admission.EvidenceKinds {
		ev = admission.EvidenceNone
	}
	if !knownReason(reason) {
		reason = ReasonOverloaded
	}
	if c := t.find(guard, reason, ev, guard != OtherGuards); c != nil {
		c.n.Add(1)
		return
	}
	// The named series are full: count it among the others.
	t.find(OtherGuards, reason, ev, true).n.Add(1)
}

// find returns the counter of (guard, reason, evidence), making it if
// create and, for a named guard, the named series are not full; nil
// otherwise. (Refusals racing to make the last named series may make a
// few more: the bound is loose by the goroutines at most.)
func (t *refusalCounts) find(guard string, reason Reason, ev admission.Evidence, create bool) *refusalCounter {
	h := t.hash(guard, reason, ev)
	var fresh *refusalCounter
	for i := range uint64(refusalSlots) {
		slot := &t.slots[(h+i)&(refusalSlots-1)]
		c := slot.Load()
		if c == nil {
			if !create {
				return nil
			}
			named := guard != OtherGuards
			if named && t.named.Load() >= MaxRefusalSeries {
				return nil
			}
			if fresh == nil {
				fresh = &refusalCounter{guard: guard, reason: reason, evidence: ev}
			}
			if !slot.CompareAndSwap(nil, fresh) {
				c = slot.Load() // taken meanwhile: maybe by this very series
			} else {
				if named {
					t.named.Add(1)
				}
				return fresh
			}
		}
		if c.guard == guard && c.reason == reason && c.evidence == ev {
			return c
		}
	}
	return nil // cannot happen: the table is never more than half full
}

// counts returns every series counted, sorted by guard, reason and
// evidence.
func (t *refusalCounts) counts() []RefusalCount {
	var out []RefusalCount
	for i := range t.slots {
		if c := t.slots[i].Load(); c != nil {
			out = append(out, RefusalCount{Guard: c.guard, Reason: c.reason, Evidence: c.evidence, Count: c.n.Load()})
		}
	}
	slices.SortFunc(out, func(a, b RefusalCount) int {
		return cmp.Or(cmp.Compare(a.Guard, b.Guard), cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Evidence, b.Evidence))
	})
	return out
}

// RefusalCounts returns how many refusals the Engine recorded
// (Refused) by guard, reason and evidence since New, sorted; series
// with no refusal are left out. It allocates; call it at scrape time.
func (e *Engine) RefusalCounts() []RefusalCount { return e.counts.counts() }
