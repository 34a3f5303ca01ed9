// Package methodkind remembers the stream kind of each method a server's
// handlers showed, for a front-end that admits calls before it can tell
// a stream from a unary call (grpcguard's tap, connectguard's middleware:
// a gRPC request looks the same for every kind). A method not remembered
// is of decide.UnknownKind (admission.Call.StreamUnknown).
package methodkind

import (
	"sync"
	"sync/atomic"

	"github.com/levee-go/levee/decide"
)

// Max caps the methods a Set remembers: a front-end notes only the
// methods a handler served, so a service's own fit; the cap keeps the set
// (and its copies) bounded whatever names come.
const Max = 4096

// Set is the kinds of the methods noted. Its zero value remembers none.
// It is safe for concurrent use: Of takes no lock and allocates nothing;
// Note takes a lock and copies the set only for a method not remembered
// while the set has room.
type Set struct {
	m  atomic.Pointer[map[string]decide.Kind] // replaced, never changed
	mu sync.Mutex                             // serialises Note's copies
}

// Of is method's kind as noted, or decide.UnknownKind.
func (s *Set) Of(method string) decide.Kind {
	if m := s.m.Load(); m != nil {
		if k, ok := (*m)[method]; ok {
			return k
		}
	}
	return decide.UnknownKind
}

// Note remembers that method's calls are of kind, unless the set holds it
// already or is full. The first kind noted for a method stays.
func (s *Set) Note(method string, kind decide.Kind) {
	if !s.room(method) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.room(method) {
		return
	}
	m := map[string]decide.Kind{}
	if old := s.m.Load(); old != nil {
		m = make(map[string]decide.Kind, len(*old)+1)
		for k, v := range *old {
			m[k] = v
		}
	}
	m[method] = kind
	s.m.Store(&m)
}

// room reports whether method is not remembered and the set has room.
func (s *Set) room(method string) bool {
	m := s.m.Load()
	if m == nil {
		return true
	}
	_, ok := (*m)[method]
	return !ok && len(*m) < Max
}

// Len is how many methods the set remembers.
func (s *Set) Len() int {
	if m := s.m.Load(); m != nil {
		return len(*m)
	}
	return 0
}
