package fair

import (
	"hash/maphash"
	"sync"
)

// Tenants is a table of entries by tenant name, in 64 shards under
// read-write locks, so that looking a tenant up takes no exclusive lock.
// Init it before use; the zero Tenants is not usable. It is safe for
// concurrent use, and allocates only to add an entry.
type Tenants[V any] struct {
	seed   maphash.Seed
	shards [64]tenantShard[V]
}

type tenantShard[V any] struct {
	mu sync.RWMutex
	m  map[string]*V
	_  [32]byte // a shard a cache line
}

// Init makes t an empty table.
func (t *Tenants[V]) Init() { t.seed = maphash.MakeSeed() }

func (t *Tenants[V]) shard(name string) *tenantShard[V] {
	return &t.shards[maphash.String(t.seed, name)&63]
}

// Get returns name's entry, or nil.
func (t *Tenants[V]) Get(name string) *V {
	s := t.shard(name)
	s.mu.RLock()
	v := s.m[name]
	s.mu.RUnlock()
	return v
}

// Add returns name's entry, or if it has none, what mk returns, which
// becomes its entry if add: mk runs under the shard's write lock, so at
// most one entry is made for a name; it must not call t.
func (t *Tenants[V]) Add(name string, mk func() (v *V, add bool)) *V {
	s := t.shard(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.m[name]; v != nil {
		return v
	}
	v, add := mk()
	if add {
		if s.m == nil {
			s.m = map[string]*V{}
		}
		s.m[name] = v
	}
	return v
}

// Sweep removes the entries drop reports true for, and returns how many
// it removed. drop runs under a shard's write lock: it must not call t.
func (t *Tenants[V]) Sweep(drop func(*V) bool) (n int) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for name, v := range s.m {
			if drop(v) {
				delete(s.m, name)
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

// Each calls fn with each entry, in no order, until fn returns false;
// it reports whether none did. fn runs under a shard's read lock: it
// must not call t.
func (t *Tenants[V]) Each(fn func(*V) bool) bool {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		for _, v := range s.m {
			if !fn(v) {
				s.mu.RUnlock()
				return false
			}
		}
		s.mu.RUnlock()
	}
	return true
}
