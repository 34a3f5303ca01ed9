package fair

// Queue hands turns to waiting calls: to the highest class with calls
// waiting, and within it, among its lanes (Line), by start-time fair
// queueing (Goyal, Vin and Cheng, 1996). A call's start tag is the later
// of the virtual clock (the tag of the last call handed a turn) and its
// line's finish tag, which each call advances by its cost over its
// line's weight; the smallest start tag goes first. The zero Queue is
// empty and ready. It is not safe for concurrent use: its owner holds a
// lock around every method. It allocates only to grow a class's list of
// lines with calls.
type Queue[T any] struct {
	vclock float64             // start tag of the last call handed a turn
	active [Classes][]*Line[T] // lines with calls waiting, by class
}

// Line is one lane's queue of waiting calls, in one class. Make it with
// NewLine; the zero Line is a line of the lowest class. A Line must not
// be copied once a call has waited in it: its calls and its Queue point
// to it.
type Line[T any] struct {
	head, tail *Item[T]
	finish     float64 // finish tag of the line's last queued call
	class      int
}

// NewLine returns an empty line of class ci.
func NewLine[T any](ci int) Line[T] { return Line[T]{class: ci} }

// Item is one waiting call of a line; V is the owner's. An Item is in
// at most one line at a time and must not be copied while it is.
type Item[T any] struct {
	next *Item[T]
	line *Line[T]
	tag  float64 // start tag
	inc  float64 // what it added to its line's finish tag
	V    T
}

// Push queues it at the end of ln, of cost (its share of the turns:
// its work over its line's weight).
func (q *Queue[T]) Push(ln *Line[T], it *Item[T], cost float64) {
	it.next, it.line = nil, ln
	it.tag = max(q.vclock, ln.finish)
	it.inc = cost
	ln.finish = it.tag + it.inc
	if ln.tail == nil {
		ln.head = it
		q.active[ln.class] = append(q.active[ln.class], ln)
	} else {
		ln.tail.next = it
	}
	ln.tail = it
}

// Highest returns the highest class with calls waiting; -1 if none.
func (q *Queue[T]) Highest() int {
	ci := Classes - 1
	for ci >= 0 && len(q.active[ci]) == 0 {
		ci--
	}
	return ci
}

// Pop removes and returns the next call to get a turn: of the highest
// class waiting, the smallest start tag. It needs a call waiting.
func (q *Queue[T]) Pop() *Item[T] {
	active := q.active[q.Highest()]
	best := active[0]
	for _, ln := range active[1:] {
		if ln.head.tag < best.head.tag {
			best = ln
		}
	}
	it := best.head
	best.head = it.next
	if best.head == nil {
		best.tail = nil
		q.deactivate(best)
	}
	q.vclock = max(q.vclock, it.tag)
	it.next, it.line = nil, nil
	return it
}

// Remove takes it, still waiting, out of its line, which no longer waits
// for its tag.
func (q *Queue[T]) Remove(it *Item[T]) {
	ln := it.line
	var prev *Item[T]
	for c := ln.head; c != nil; prev, c = c, c.next {
		if c != it {
			continue
		}
		if prev == nil {
			ln.head = c.next
		} else {
			prev.next = c.next
		}
		if ln.tail == c {
			ln.tail = prev
		}
		if ln.head == nil {
			q.deactivate(ln)
		}
		break
	}
	ln.finish -= it.inc
	it.next, it.line = nil, nil
}

// deactivate removes ln, empty, from its class's active list.
func (q *Queue[T]) deactivate(ln *Line[T]) {
	active := q.active[ln.class]
	for i, a := range active {
		if a == ln {
			last := len(active) - 1
			active[i] = active[last]
			active[last] = nil
			q.active[ln.class] = active[:last]
			return
		}
	}
}
