package fair

import (
	"slices"
	"testing"

	"github.com/levee-go/levee/admission"
)

// pushN queues n calls named name on ln, each of cost.
func pushN(q *Queue[string], ln *Line[string], name string, n int, cost float64) []*Item[string] {
	var out []*Item[string]
	for range n {
		it := &Item[string]{V: name}
		q.Push(ln, it, cost)
		out = append(out, it)
	}
	return out
}

// popAll pops every waiting call, returning their names in turn order.
func popAll(q *Queue[string]) []string {
	var out []string
	for q.Highest() >= 0 {
		out = append(out, q.Pop().V)
	}
	return out
}

// TestQueueSharesByWeight: within a class, lines backlogged together get
// turns in proportion to their weights (a cost of half for twice the
// weight), interleaved, not one line's calls after the other's.
func TestQueueSharesByWeight(t *testing.T) {
	var q Queue[string]
	ci := admission.Critical.Index()
	a, b := NewLine[string](ci), NewLine[string](ci)
	pushN(&q, &a, "a", 4, 1) // weight 2: cost 1 a call
	pushN(&q, &b, "b", 4, 2) // weight 1: cost 2
	got := popAll(&q)
	// Start tags: a 0,1,2,3; b 0,2,4,6. Ties go to the line first active.
	want := []string{"a", "b", "a", "a", "b", "a", "b", "b"}
	if !slices.Equal(got, want) {
		t.Errorf("turn order %v, want %v", got, want)
	}
}

// TestQueueClassesFirst: every call of a higher class goes before any of
// a lower one, whatever their tags.
func TestQueueClassesFirst(t *testing.T) {
	var q Queue[string]
	shed, crit := NewLine[string](admission.Sheddable.Index()), NewLine[string](admission.Critical.Index())
	pushN(&q, &shed, "shed", 2, 1)
	pushN(&q, &crit, "crit", 2, 100)
	if h := q.Highest(); h != admission.Critical.Index() {
		t.Errorf("Highest() = %d, want critical's %d", h, admission.Critical.Index())
	}
	if got, want := popAll(&q), []string{"crit", "crit", "shed", "shed"}; !slices.Equal(got, want) {
		t.Errorf("turn order %v, want %v", got, want)
	}
	if h := q.Highest(); h != -1 {
		t.Errorf("empty queue: Highest() = %d, want -1", h)
	}
}

// TestQueueNewLineStartsAtTheClock: a line that starts waiting after
// others were served starts at the virtual clock, not behind their
// finish tags, and has no credit for the time it did not wait.
func TestQueueNewLineStartsAtTheClock(t *testing.T) {
	var q Queue[string]
	ci := admission.Critical.Index()
	a, b := NewLine[string](ci), NewLine[string](ci)
	pushN(&q, &a, "a", 6, 1)
	for range 3 {
		q.Pop() // a's tags 0, 1, 2 served: the clock reads 2
	}
	pushN(&q, &b, "b", 2, 1) // tags 2, 3: beside a's 3, 4, 5
	if got, want := popAll(&q), []string{"b", "a", "b", "a", "a"}; !slices.Equal(got, want) {
		t.Errorf("turn order %v, want %v", got, want)
	}
}

// TestQueueRemove: a call that gives up leaves its line, and the line's
// later calls no longer wait for its tag; a line left empty is no longer
// waiting.
func TestQueueRemove(t *testing.T) {
	var q Queue[string]
	ci := admission.Critical.Index()
	a, b := NewLine[string](ci), NewLine[string](ci)
	as := pushN(&q, &a, "a", 3, 10) // tags 0, 10, 20
	q.Remove(as[1])
	q.Remove(as[2])
	pushN(&q, &b, "b", 2, 10)     // tags 0, 10
	pushN(&q, &a, "a-late", 1, 1) // tag 10, not 30
	if got, want := popAll(&q), []string{"a", "b", "a-late", "b"}; !slices.Equal(got, want) {
		t.Errorf("turn order %v, want %v", got, want)
	}
	c := NewLine[string](ci)
	only := pushN(&q, &c, "c", 1, 1)
	q.Remove(only[0])
	if h := q.Highest(); h != -1 {
		t.Errorf("the only waiting call removed: Highest() = %d, want -1", h)
	}
}
