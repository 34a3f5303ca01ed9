package runlimit

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/runlimit/internal/fair"
	"github.com/levee-go/levee/runlimit/internal/places"
)

// Defaults of the tenants a Limiter shares its turns among.
const (
	// DefaultMaxTenants is how many tenants a Limiter tracks separately
	// (WithMaxTenants); later tenants share the lanes of OverflowTenant.
	DefaultMaxTenants = 4096
	// MaxTenantLen is the longest tenant name kept: a longer name is
	// treated as OverflowTenant, so that memory stays bounded whatever
	// callers send.
	MaxTenantLen = 128
	tenantIdle   = 10 * time.Second // empty and unused this long, a tenant's lanes are forgotten
	sweepEvery   = time.Second      // how often idle tenants are looked for
)

// OverflowTenant is the tenant shared by tenants beyond a Limiter's cap
// (WithMaxTenants) and by names longer than MaxTenantLen.
const OverflowTenant = "*"

// weightOne is a weight of 1 in fixed point.
const weightOne = fair.One

// Lane is the queue of one tenant's calls of one flow in one criticality
// class. Turns go first to the highest class with calls waiting; within a
// class, lanes share them max-min fairly by start-time fair queueing,
// each call weighted by its flow's service time over its tenant's weight.
// Get one with Flow.Lane; the zero Lane is not usable. It is safe for
// concurrent use.
type Lane struct {
	f      *Flow
	tenant string
	class  admission.Criticality
	weight int64 // fixed point, weightOne = 1
	// Every call writes count and tapped, and reads the fields above: a
	// cache line between them keeps one processor's writes from taking
	// the others' reads' line away (false sharing; docs/cost.md).
	_ [cacheLine]byte

	count  atomic.Int64 // calls reserved (reserve) and not yet given a turn or refused
	tapped places.Slots // reservations the guard made not yet asked for a turn, by generation (tapIn)

	line fair.Line[*waiter] // its waiting calls; under Limiter.mu
}

// Tenant returns the lane's tenant ("" for calls of no tenant).
func (ln *Lane) Tenant() string { return ln.tenant }

// Class returns the lane's criticality class.
func (ln *Lane) Class() admission.Criticality { return ln.class }

// Flow returns the flow the lane belongs to.
func (ln *Lane) Flow() *Flow { return ln.f }

// Waiting returns the calls of the lane admitted to wait for a turn that
// have not yet got one or given up, counting a call a guard admitted only
// once its handler asks for its turn.
func (ln *Lane) Waiting() int { return int(ln.count.Load() - ln.tapped.Count()) }

// Held returns the places held in the lane, which its bound counts:
// Waiting, and the calls a guard admitted whose handler has not asked
// for its turn yet.
func (ln *Lane) Held() int { return int(ln.count.Load()) }

// reserve counts a call admitted to wait and returns the cost it added
// to its class's work: end it with unreserve(cost).
func (ln *Lane) reserve() int64 { return ln.reserveCost(int64(ln.f.cost())) }

// reserveCost is reserve, adding cost ns.
func (ln *Lane) reserveCost(cost int64) int64 {
	ln.f.l.sh.Reserve(ln.class.Index(), &ln.count, ln.weight, cost)
	return cost
}

// unreserve ends a reservation that added cost.
func (ln *Lane) unreserve(cost int64) { ln.unreserveN(1, cost) }

// unreserveN ends n reservations that added cost in all.
func (ln *Lane) unreserveN(n, cost int64) {
	ln.f.l.sh.Unreserve(ln.class.Index(), &ln.count, ln.weight, n, cost)
}

// Admissible reports whether a new call of the lane may be admitted to
// wait for a turn: a lane with no call waiting always may; otherwise the
// calls that start within half its flow's queue target (the whole of it
// while its class leaves room), after higher classes, plus two, of which
// a backlogged lane gets its weight's share. It counts the lane's places
// less those a guard reserved in an earlier interval whose handlers have
// not asked for their turn (late request bodies). docs/runlimit.md,
// "Lane.Admissible", gives the rule in full. It is safe for concurrent
// use.
func (ln *Lane) Admissible() bool {
	l := ln.f.l
	return ln.admissible(0, ln.queued(ln.tapGen(l.nanos(l.o.now())), false))
}

// queued is the places the lane's bound counts at generation gen: Held,
// less the guard's places of an earlier generation not yet asked for
// (late request bodies: docs/runlimit.md, "NewGuard"), or with ready (a
// handler asking now) less all not asked for. It may read below zero.
func (ln *Lane) queued(gen uint64, ready bool) int64 {
	if ready {
		return ln.count.Load() - ln.tapped.Count()
	}
	return ln.count.Load() - ln.tapped.Before(gen)
}

// admissible is Admissible for q places queued, extra ns more in bound.
func (ln *Lane) admissible(extra float64, q int64) bool {
	if q <= 0 {
		return true
	}
	f := ln.f
	return f.l.sh.Fits(fair.Bound{Class: ln.class.Index(), Queued: q, Weight: ln.weight, Limit: f.l.limit.Load(),
		Horizon: float64(f.QueueTarget() / 2), Cost: f.cost()}, extra)
}

// A place the guard reserves at admission that its handler has not asked
// a turn for lapses once its generation (intervals since the epoch) is
// two behind: internal/places counts them (docs/runlimit.md, "NewGuard").

// tapGen is the generation of a reservation made at now.
func (ln *Lane) tapGen(now int64) uint64 { return places.Gen(now, int64(ln.f.l.o.interval)) }

// giveBack ends the reservations that lapsed.
func (ln *Lane) giveBack(l places.Lapsed) {
	if l.N > 0 {
		ln.unreserveN(int64(l.N), int64(l.Work)*int64(time.Microsecond))
	}
}

// lapse ends the reservations that lapsed at generation now.
func (ln *Lane) lapse(now uint64) { ln.giveBack(ln.tapped.Lapse(now)) }

// tapIn reserves a place at generation gen (after lapse) of us µs, and
// the generation it is counted in; uncounted (a slot full), it never
// lapses.
func (ln *Lane) tapIn(gen uint64) (in, us uint64, counted bool) {
	us = min(uint64(ln.f.cost()+float64(time.Microsecond)-1)/uint64(time.Microsecond), places.WorkMask)
	ln.reserveCost(int64(us) * int64(time.Microsecond))
	in, counted, lapsed := ln.tapped.In(gen, us)
	ln.giveBack(lapsed)
	return in, us, counted
}

// tapOut takes a reservation of gen and us µs out at now, reporting
// whether it was still the call's (not lapsed).
func (ln *Lane) tapOut(gen, us, now uint64) bool {
	ok, lapsed := ln.tapped.Out(gen, us, now)
	ln.giveBack(lapsed)
	return ok
}

// patience is how long a call waits before ErrTimeout: twice its flow's
// queue target, roomyPatience times it while its class leaves room.
func (ln *Lane) patience() time.Duration {
	if ln.f.l.sh.Roomy(ln.class.Index()) {
		return roomyPatience * ln.f.QueueTarget()
	}
	return 2 * ln.f.QueueTarget()
}

// roomyPatience: a class that leaves room serves all its calls in the
// end, so a long wait is a burst that passes.
const roomyPatience = 8

// Acquire takes a turn for a call of the lane, waiting if every turn is
// taken, as Flow.Acquire does.
func (ln *Lane) Acquire(ctx context.Context) (Ticket, error) {
	ln.f.calls.Add(1) // until the turn ends: a flow with a call in it is never forgotten (addFlow)
	t, err := ln.acquire(ctx)
	if err != nil {
		ln.f.calls.Add(-1)
		return t, err
	}
	t.flags |= countedFlag
	return t, nil
}

// acquire is Acquire without counting the call in its flow's calls.
func (ln *Lane) acquire(ctx context.Context) (Ticket, error) {
	ln.f.touch()
	l := ln.f.l
	now := l.o.now()
	if t, ok := ln.f.tryAcquire(now); ok {
		l.offered.Add(1)
		t.ln = ln
		return t, nil
	}
	cost, ok := ln.admit(now) // judged as the guard judges a call (NewGuard); a refusal is counted there
	if !ok {
		return Ticket{}, ErrQueueFull
	}
	l.offered.Add(1)
	t, w := ln.enqueue(cost)
	if w == nil {
		return t, nil
	}
	t, _, err := ln.wait(ctx, w)
	return t, err
}

// classLanes are the lanes of one tenant of a flow, one per class.
type classLanes [admission.Classes]Lane

func (cl *classLanes) init(f *Flow, tenant string, weight int64) {
	for i := range cl {
		class := admission.Criticality(i) + admission.Sheddable
		cl[i] = Lane{f: f, tenant: tenant, class: class, weight: weight, line: fair.NewLine[*waiter](class.Index())}
	}
}

// idle reports whether no call waits in the lanes.
func (cl *classLanes) idle() bool {
	for i := range cl {
		if cl[i].count.Load() != 0 {
			return false
		}
	}
	return true
}

// tenantLanes are the lanes of one tenant of a flow.
type tenantLanes struct {
	lanes classLanes
	used  atomic.Int64 // start of the interval of its last admission, ns since the Limiter's epoch
}

// Lane returns the lane of tenant's calls of class on f. Calls of no
// tenant have tenant "". A name longer than MaxTenantLen, and tenants
// beyond the Limiter's cap (WithMaxTenants), share the lanes of
// OverflowTenant. Idle tenants are forgotten after a while; a Lane kept
// meanwhile still works, but the tenant's new calls get new lanes.
func (f *Flow) Lane(tenant string, class admission.Criticality) *Lane {
	ci := class.Index()
	if tenant == "" {
		return &f.lanes[ci]
	}
	if len(tenant) > MaxTenantLen {
		return &f.overflowLanes().lanes[ci]
	}
	tl := f.tenants.Get(tenant)
	if tl == nil {
		tl = f.newTenant(tenant)
	}
	f.l.markUsed(&tl.used)
	return &tl.lanes[ci]
}

// newTenant adds tenant's lanes to f, unless f is forgotten or the
// Limiter tracks as many tenants as it may: then OverflowTenant's.
func (f *Flow) newTenant(tenant string) *tenantLanes {
	l := f.l
	return f.tenants.Add(tenant, func() (*tenantLanes, bool) {
		if f.gone.Load() { // forgotten (addFlow): its tenants are neither counted nor swept
			return f.overflowLanes(), false
		}
		if l.tenantCount.Add(1) > int64(l.o.maxTenants) {
			l.tenantCount.Add(-1)
			return f.overflowLanes(), false
		}
		tl := new(tenantLanes)
		tl.lanes.init(f, tenant, max(1, int64(l.TenantWeight(tenant)*weightOne)))
		tl.used.Store(l.openedAt.Load())
		return tl, true
	})
}

func (f *Flow) overflowLanes() *tenantLanes {
	if tl := f.overflow.Load(); tl != nil {
		return tl
	}
	tl := new(tenantLanes)
	tl.lanes.init(f, OverflowTenant, weightOne)
	if f.overflow.CompareAndSwap(nil, tl) {
		return tl
	}
	return f.overflow.Load()
}

// sweepTenants forgets tenants empty and unused for tenantIdle. Needs upd.
func (l *Limiter) sweepTenants(flows []*Flow, now int64) {
	// Counted out one by one, under the shard's lock, as they go.
	idle := func(tl *tenantLanes) bool {
		if now-tl.used.Load() < int64(tenantIdle) || !tl.lanes.idle() {
			return false
		}
		l.tenantCount.Add(-1)
		return true
	}
	for _, f := range flows {
		f.tenants.Sweep(idle)
	}
}

// forget drops the tenants of a flow no longer tracked (addFlow) from the
// Limiter's count. Needs Limiter.flowsMu.
func (f *Flow) forget() {
	f.gone.Store(true)
	f.tenants.Sweep(func(*tenantLanes) bool {
		f.l.tenantCount.Add(-1)
		return true
	})
}

// Tenants returns how many tenants the Limiter tracks separately, over
// all its flows.
func (l *Limiter) Tenants() int { return int(l.tenantCount.Load()) }
