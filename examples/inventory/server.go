package inventory

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
)

// Server is the CoreCart inventory service: it implements
// inventoryv1.InventoryServiceServer over stock kept in memory.
//
// Build it with NewServer; the zero value is not usable. Its defaults are
// those of the options: the DefaultSKUs catalogue at DefaultStock units,
// DefaultCPUWork per Allocate, DefaultOrderMemory orders remembered and no
// database. A Server is safe for concurrent use by any number of calls. It
// starts no goroutines and needs no Close.
type Server struct {
	inventoryv1.UnimplementedInventoryServiceServer

	iterations int       // Burn rounds per Allocate
	allocSize  int64     // bytes each Allocate holds (WithAllocPerCall)
	readIter   int       // Burn rounds per GetStock
	db         *database // nil without WithDatabase

	// now is the server's clock: time.Now, or a fake set by in-package
	// tests.
	now func() time.Time

	// afterWork, when set by in-package tests, runs after an Allocate's CPU
	// work and before it touches the stock.
	afterWork func(ctx context.Context)

	mu     sync.Mutex
	skus   []string              // catalogue order; fixed after NewServer
	stock  map[string]*skuStock  // by SKU; the set of keys is fixed after NewServer
	orders map[string]orderState // remembered orders by id
	ring   []string              // order ids in arrival order, oldest at head; grows to memory
	memory int                   // order ids remembered at most (WithOrderMemory)
	head   int                   // index of the oldest id in ring
	count  int                   // ids in ring

	sink atomic.Uint64 // folds in the CPU work's digests so it cannot be elided

	calls        atomic.Uint64
	late         atomic.Uint64
	canceled     atomic.Uint64
	allocated    atomic.Uint64
	replayed     atomic.Uint64
	outOfStock   atomic.Uint64
	rejected     atomic.Uint64
	released     atomic.Uint64
	forgotten    atomic.Uint64
	inFlight     atomic.Int64
	peakInFlight atomic.Int64
}

// skuStock is the stock of one SKU. Guarded by Server.mu.
// Invariant: initial == available + allocated + committed, all >= 0.
type skuStock struct {
	initial   int64
	available int64
	allocated int64 // held by remembered, unreleased orders
	committed int64 // held by orders the server has forgotten
}

// orderState is what the server remembers of an applied Allocate.
type orderState struct {
	sku       string
	quantity  int32
	remaining int64 // the first answer's remaining stock
	released  bool
}

// NewServer returns a Server stocked with the catalogue of the WithStock
// options, or with DefaultSKUs at DefaultStock units each when none is given.
// It checks every option's value and, when any is bad, returns a nil Server
// and an error naming each bad option and value (all of them, joined with
// errors.Join), such as
//
//	inventory: WithOrderMemory: n must be >= 1, got 0
//
// Unless WithWorkIterations is given, the first NewServer of a process with a
// non-zero CPU work measures the machine's speed (about 20 ms).
func NewServer(opts ...Option) (*Server, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.stock == nil {
		o.stock = make(map[string]int64)
		for _, sku := range DefaultSKUs() {
			o.skus = append(o.skus, sku)
			o.stock[sku] = DefaultStock
		}
	}
	s := &Server{
		iterations: o.iterations,
		readIter:   iterationsFor(o.readWork),
		skus:       o.skus,
		stock:      make(map[string]*skuStock, len(o.stock)),
		orders:     make(map[string]orderState),
		memory:     o.orderMemory,
		now:        time.Now,
		allocSize:  o.allocSize,
	}
	if o.dbSet {
		s.db = newDatabase(o.dbConns, o.dbLatency)
	}
	if !o.iterSet {
		s.iterations = iterationsFor(o.cpuWork)
	}
	for sku, units := range o.stock {
		s.stock[sku] = &skuStock{initial: units, available: units}
	}
	return s, nil
}

// WorkIterations returns the rounds of Burn each Allocate does.
func (s *Server) WorkIterations() int { return s.iterations }

// StockReadIterations returns the rounds of Burn each GetStock does
// (0 without WithStockReadWork).
func (s *Server) StockReadIterations() int { return s.readIter }

// SKUs returns the catalogue's SKUs in the order they were configured.
func (s *Server) SKUs() []string { return append([]string(nil), s.skus...) }

// Allocate reserves req.Quantity units of req.Sku for req.OrderId. With
// WithAllocPerCall it first allocates its payload, held until it
// returns. It
// checks its arguments, then does its CPU work, then, with WithDatabase,
// takes a database connection and holds it for the query, and then applies
// the order under the stock lock (still holding the connection). An order id
// already applied returns its first answer and changes nothing. Errors:
// INVALID_ARGUMENT (empty sku or order id, quantity <= 0), NOT_FOUND
// (unknown sku), FAILED_PRECONDITION (not enough stock), ALREADY_EXISTS
// (order id reused for a different sku or quantity), and with WithDatabase
// DEADLINE_EXCEEDED or CANCELED (the call's context ended while it waited for
// a connection or during the query). A refused or failed call changes
// nothing and is not remembered.
func (s *Server) Allocate(ctx context.Context, req *inventoryv1.AllocateRequest) (*inventoryv1.AllocateResponse, error) {
	s.begin()
	defer s.end(ctx)
	if s.allocSize > 0 {
		payload := hold(s.allocSize)
		defer runtime.KeepAlive(payload)
	}

	sku, qty, id := req.GetSku(), req.GetQuantity(), req.GetOrderId()
	switch {
	case sku == "":
		return nil, s.reject(codes.InvalidArgument, "inventory: sku is required")
	case id == "":
		return nil, s.reject(codes.InvalidArgument, "inventory: order_id is required")
	case qty <= 0:
		return nil, s.reject(codes.InvalidArgument, "inventory: quantity must be > 0, got %d", qty)
	}

	if s.iterations > 0 {
		sum := Burn(s.iterations, uint64(len(id))<<32|uint64(uint32(qty)))
		s.sink.Add(uint64(sum[0]))
	}
	if s.afterWork != nil {
		s.afterWork(ctx)
	}
	if s.db != nil {
		if err := s.db.acquire(ctx, s.now); err != nil {
			return nil, status.Errorf(status.FromContextError(err).Code(),
				"inventory: gave up waiting for a database connection: %v", err)
		}
		defer s.db.release()
		if err := s.db.query(ctx); err != nil {
			return nil, status.Errorf(status.FromContextError(err).Code(),
				"inventory: database query cut short: %v", err)
		}
	}

	s.mu.Lock()
	st, ok := s.stock[sku]
	if !ok {
		s.mu.Unlock()
		return nil, s.reject(codes.NotFound, "inventory: unknown sku %q", sku)
	}
	if prev, ok := s.orders[id]; ok {
		s.mu.Unlock()
		if prev.sku != sku || prev.quantity != qty {
			return nil, s.reject(codes.AlreadyExists,
				"inventory: order_id %q was already applied to %d of %q; a retry must repeat it exactly",
				id, prev.quantity, prev.sku)
		}
		s.replayed.Add(1)
		return &inventoryv1.AllocateResponse{OrderId: id, Sku: sku, Quantity: qty, Remaining: prev.remaining}, nil
	}
	if st.available < int64(qty) {
		available := st.available
		s.mu.Unlock()
		s.outOfStock.Add(1)
		return nil, status.Errorf(codes.FailedPrecondition,
			"inventory: not enough stock of %q: %d available, %d requested", sku, available, qty)
	}
	st.available -= int64(qty)
	st.allocated += int64(qty)
	remaining := st.available
	s.remember(id, orderState{sku: sku, quantity: qty, remaining: remaining})
	s.mu.Unlock()

	s.allocated.Add(1)
	return &inventoryv1.AllocateResponse{OrderId: id, Sku: sku, Quantity: qty, Remaining: remaining}, nil
}

// pageSize is the stride at which hold touches its buffer.
const pageSize = 4096

// hold returns size fresh bytes with every page written, so that they are
// resident.
func hold(size int64) []byte {
	b := make([]byte, size)
	for i := 0; i < len(b); i += pageSize {
		b[i] = 1
	}
	return b
}

// remember records an applied order, forgetting the oldest one when the
// memory is full. Its stock, if still allocated, becomes committed. The
// ring grows with the orders up to the memory, which may be far larger
// than a server ever sees. Called with s.mu held.
func (s *Server) remember(id string, o orderState) {
	if s.count == s.memory {
		oldID := s.ring[s.head]
		old := s.orders[oldID]
		if !old.released {
			st := s.stock[old.sku]
			st.allocated -= int64(old.quantity)
			st.committed += int64(old.quantity)
		}
		delete(s.orders, oldID)
		s.ring[s.head] = id
		s.head = (s.head + 1) % len(s.ring)
		s.forgotten.Add(1)
	} else {
		s.ring = append(s.ring, id) // head is 0 until the ring is full
		s.count++
	}
	s.orders[id] = o
}

// Release returns the stock allocated to req.OrderId. The first Release of an
// order returns its quantity (Released true); later ones change nothing and
// answer Released false with Quantity 0. Errors: INVALID_ARGUMENT (empty
// order id), NOT_FOUND (an order id never applied, or forgotten; see
// WithOrderMemory). Release does no CPU work.
func (s *Server) Release(ctx context.Context, req *inventoryv1.ReleaseRequest) (*inventoryv1.ReleaseResponse, error) {
	s.begin()
	defer s.end(ctx)

	id := req.GetOrderId()
	if id == "" {
		return nil, s.reject(codes.InvalidArgument, "inventory: order_id is required")
	}
	s.mu.Lock()
	o, ok := s.orders[id]
	if !ok {
		s.mu.Unlock()
		return nil, s.reject(codes.NotFound, "inventory: unknown order_id %q", id)
	}
	st := s.stock[o.sku]
	resp := &inventoryv1.ReleaseResponse{OrderId: id, Sku: o.sku}
	if !o.released {
		st.available += int64(o.quantity)
		st.allocated -= int64(o.quantity)
		o.released = true
		s.orders[id] = o
		resp.Quantity, resp.Released = o.quantity, true
	}
	resp.Available = st.available
	s.mu.Unlock()

	if resp.Released {
		s.released.Add(1)
	}
	return resp, nil
}

// GetStock reports the units of req.Sku available for allocation. Errors:
// INVALID_ARGUMENT (empty sku), NOT_FOUND (unknown sku). It does no CPU work
// unless WithStockReadWork is given, and then does it after checking its
// argument and before it reads the stock.
func (s *Server) GetStock(ctx context.Context, req *inventoryv1.GetStockRequest) (*inventoryv1.GetStockResponse, error) {
	s.begin()
	defer s.end(ctx)

	sku := req.GetSku()
	if sku == "" {
		return nil, s.reject(codes.InvalidArgument, "inventory: sku is required")
	}
	if s.readIter > 0 {
		sum := Burn(s.readIter, uint64(len(sku)))
		s.sink.Add(uint64(sum[0]))
	}
	lvl, ok := s.Stock(sku)
	if !ok {
		return nil, s.reject(codes.NotFound, "inventory: unknown sku %q", sku)
	}
	return &inventoryv1.GetStockResponse{Sku: sku, Available: lvl.Available}, nil
}

// StockLevel is a consistent snapshot of one SKU's stock, returned by
// Server.Stock. Initial == Available + Allocated + Committed always holds.
// The zero value is what Stock returns for an unknown SKU. It is a plain
// value: copies are independent, and reading one from several goroutines is
// safe.
type StockLevel struct {
	SKU       string
	Initial   int64 // units the SKU started with
	Available int64 // units free to allocate
	Allocated int64 // units held by remembered orders not yet released
	Committed int64 // units held by orders forgotten before release (see WithOrderMemory)
}

// Stock returns a snapshot of sku's stock, and false when sku is not in the
// catalogue.
func (s *Server) Stock(sku string) (StockLevel, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.stock[sku]
	if !ok {
		return StockLevel{}, false
	}
	return StockLevel{SKU: sku, Initial: st.initial, Available: st.available, Allocated: st.allocated, Committed: st.committed}, true
}

// Stats is a snapshot of a Server's counters and gauges, returned by
// Server.Stats. Counts are totals since NewServer. The zero value is an
// empty snapshot. It is a plain value: copies are independent, and reading
// one from several goroutines is safe.
type Stats struct {
	// Calls counts handler runs that finished, all methods together.
	Calls uint64
	// Late counts handler runs that finished at or after the caller's
	// deadline: work whose answer nobody waited for.
	Late uint64
	// Canceled counts handler runs that finished after the caller cancelled
	// (or its connection went away) before the deadline.
	Canceled uint64

	// Allocated counts Allocate calls that applied an order.
	Allocated uint64
	// Replayed counts Allocate retries answered from the remembered order.
	Replayed uint64
	// OutOfStock counts Allocate calls refused with FAILED_PRECONDITION.
	OutOfStock uint64
	// Rejected counts calls refused with INVALID_ARGUMENT, NOT_FOUND or
	// ALREADY_EXISTS, all methods together.
	Rejected uint64
	// Released counts Release calls that returned stock.
	Released uint64
	// Forgotten counts orders dropped from the idempotency memory.
	Forgotten uint64

	// InFlight is the number of handlers running now; PeakInFlight the most
	// that ever ran at once.
	InFlight, PeakInFlight int64

	// The simulated database (WithDatabase); all zero without one.

	// DBConns is the size of the connection pool.
	DBConns int
	// DBInUse is the number of connections held now; DBPeakInUse the most
	// ever held at once, never above DBConns.
	DBInUse, DBPeakInUse int64
	// DBWaiting is the number of calls waiting for a connection now.
	DBWaiting int64
	// DBWaited counts calls that found every connection taken and waited
	// for one, whether or not they got it; DBWaitTime is the time they
	// spent waiting, all together, added as each wait ends (the calls
	// waiting now are in DBWaiting, not yet here). DBWaitTime / DBWaited is
	// close to the mean wait of the calls that waited.
	DBWaited   uint64
	DBWaitTime time.Duration
	// DBQueries counts queries that ran to the end.
	DBQueries uint64
	// DBGaveUp counts calls whose context ended before they got a
	// connection; DBCutShort counts queries cut short because the call's
	// context ended during them (connection time spent for nobody). Both
	// answered DEADLINE_EXCEEDED or CANCELED and changed nothing.
	DBGaveUp, DBCutShort uint64
}

// Wasted returns the handler runs whose caller no longer waited for the
// answer when they finished: Late + Canceled.
func (st Stats) Wasted() uint64 { return st.Late + st.Canceled }

// Stats returns a snapshot of the server's counters. Each counter is read
// atomically; the snapshot as a whole is not taken at one instant.
func (s *Server) Stats() Stats {
	st := Stats{
		Calls:        s.calls.Load(),
		Late:         s.late.Load(),
		Canceled:     s.canceled.Load(),
		Allocated:    s.allocated.Load(),
		Replayed:     s.replayed.Load(),
		OutOfStock:   s.outOfStock.Load(),
		Rejected:     s.rejected.Load(),
		Released:     s.released.Load(),
		Forgotten:    s.forgotten.Load(),
		InFlight:     s.inFlight.Load(),
		PeakInFlight: s.peakInFlight.Load(),
	}
	if db := s.db; db != nil {
		st.DBConns = cap(db.conns)
		st.DBInUse = db.inUse.Load()
		st.DBPeakInUse = db.peakInUse.Load()
		st.DBWaiting = db.waiting.Load()
		st.DBWaited = db.waited.Load()
		st.DBWaitTime = time.Duration(db.waitNanos.Load())
		st.DBQueries = db.queries.Load()
		st.DBGaveUp = db.gaveUp.Load()
		st.DBCutShort = db.cutShort.Load()
	}
	return st
}

func (s *Server) begin() {
	n := s.inFlight.Add(1)
	for {
		peak := s.peakInFlight.Load()
		if n <= peak || s.peakInFlight.CompareAndSwap(peak, n) {
			return
		}
	}
}

// end accounts for a finished handler run: late when the caller's deadline
// has passed (checked against the clock too, since the context's timer may
// not have fired yet), canceled when the caller gave up before it.
func (s *Server) end(ctx context.Context) {
	s.inFlight.Add(-1)
	s.calls.Add(1)
	err := ctx.Err()
	dl, hasDeadline := ctx.Deadline()
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (hasDeadline && !s.now().Before(dl)):
		s.late.Add(1)
	case err != nil:
		s.canceled.Add(1)
	}
}

func (s *Server) reject(c codes.Code, format string, args ...any) error {
	s.rejected.Add(1)
	return status.Errorf(c, format, args...)
}
