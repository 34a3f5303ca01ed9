package inventory

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of a Server built without options.
const (
	// DefaultCPUWork is the CPU time one Allocate burns when WithCPUWork is
	// not given.
	DefaultCPUWork = 5 * time.Millisecond

	// DefaultStock is the units each SKU of the default catalogue starts
	// with: large enough that no demo or load test runs out.
	DefaultStock int64 = 1 << 40

	// DefaultOrderMemory is how many order ids a Server remembers when
	// WithOrderMemory is not given (a few megabytes of memory).
	DefaultOrderMemory = 100_000
)

// DefaultSKUs returns the SKUs of the default catalogue, each stocked with
// DefaultStock units. The catalogue is used when no WithStock option is given.
// The returned slice is a fresh copy.
func DefaultSKUs() []string {
	return []string{"SKU-0001", "SKU-0002", "SKU-0003", "SKU-0004", "SKU-0005", "SKU-0006", "SKU-0007", "SKU-0008"}
}

// Option configures a Server built by NewServer. An option only records its
// values: it never panics, and NewServer checks every value in one place,
// returning an error that names each bad option. When an option is given
// twice, the last one counts (for WithStock: the last one for each SKU), and
// NewServer checks the values that count.
//
// Options are plain values: one may be shared by any number of NewServer
// calls, from any goroutine. A nil Option is ignored.
type Option func(*options)

type options struct {
	stock       map[string]int64
	skus        []string // catalogue order, for deterministic listings
	cpuWork     time.Duration
	iterations  int
	iterSet     bool // WithWorkIterations given: iterations wins over cpuWork
	orderMemory int
	dbConns     int
	dbLatency   time.Duration
	dbSet       bool // WithDatabase given
	readWork    time.Duration
	allocSize   int64
}

func defaultOptions() options {
	return options{
		cpuWork:     DefaultCPUWork,
		orderMemory: DefaultOrderMemory,
	}
}

// validate returns every bad value of o at once (errors.Join), each naming
// its option, or nil.
func (o *options) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("inventory: "+format, args...))
	}
	for _, sku := range o.skus {
		switch units := o.stock[sku]; {
		case sku == "":
			bad("WithStock: sku must not be empty")
		case units < 0:
			bad("WithStock(%q): units must be >= 0, got %d", sku, units)
		}
	}
	if o.cpuWork < 0 {
		bad("WithCPUWork: duration must be >= 0, got %v", o.cpuWork)
	}
	if o.iterSet && o.iterations < 0 {
		bad("WithWorkIterations: n must be >= 0, got %d", o.iterations)
	}
	if o.readWork < 0 {
		bad("WithStockReadWork: duration must be >= 0, got %v", o.readWork)
	}
	if o.allocSize < 0 {
		bad("WithAllocPerCall: size must be >= 0, got %d", o.allocSize)
	}
	if o.orderMemory < 1 {
		bad("WithOrderMemory: n must be >= 1, got %d", o.orderMemory)
	}
	if o.dbSet {
		if o.dbConns < 1 {
			bad("WithDatabase: conns must be >= 1, got %d", o.dbConns)
		}
		if o.dbLatency < 0 {
			bad("WithDatabase: latency must be >= 0, got %v", o.dbLatency)
		}
	}
	return errors.Join(errs...)
}

// WithStock adds sku to the catalogue with units available. When at least one
// WithStock is given, the default catalogue (DefaultSKUs) is not used; giving
// the same sku twice keeps the last units. NewServer fails when sku is empty
// or units is negative.
func WithStock(sku string, units int64) Option {
	return func(o *options) {
		if o.stock == nil {
			o.stock = make(map[string]int64)
		}
		if _, ok := o.stock[sku]; !ok {
			o.skus = append(o.skus, sku)
		}
		o.stock[sku] = units
	}
}

// WithCPUWork sets the CPU time each Allocate burns before it touches the
// stock (default DefaultCPUWork, 5 ms; 0 disables the work). The duration is
// turned into a number of SHA-256 iterations with a calibration measured once
// per process, so the work is a fixed amount of computation that takes about
// d on an idle core and longer on a busy one. WithWorkIterations, if given,
// takes precedence. NewServer fails when d is negative.
func WithCPUWork(d time.Duration) Option {
	return func(o *options) { o.cpuWork = d }
}

// WithStockReadWork sets the CPU time each GetStock burns before it reads
// the stock, like the CPU work of Allocate (see WithCPUWork: a fixed number
// of SHA-256 iterations calibrated once per process). A real read is cheap
// but not free: about 0.1 ms makes GetStock compete for the CPU with
// Allocate as a cached read would. Default 0: GetStock does no CPU work.
// NewServer fails when d is negative.
func WithStockReadWork(d time.Duration) Option {
	return func(o *options) { o.readWork = d }
}

// WithWorkIterations sets the work of each Allocate as an exact number of
// rounds of SHA-256's compression, one 64-byte block each (see Burn; about
// 0.03 µs each on an x86 core with SHA extensions, a few times that
// without), skipping the calibration. It takes precedence over WithCPUWork.
// NewServer fails when n is negative.
func WithWorkIterations(n int) Option {
	return func(o *options) { o.iterations, o.iterSet = n, true }
}

// WithOrderMemory sets how many order ids the server remembers for
// idempotency (default DefaultOrderMemory). When a new order would exceed it,
// the oldest remembered order is forgotten: if it still held stock, that
// stock stays allocated for good (counted as committed in StockLevel), a
// Release of it answers NOT_FOUND and a retried Allocate of it would be
// applied again. NewServer fails when n < 1.
func WithOrderMemory(n int) Option {
	return func(o *options) { o.orderMemory = n }
}

// WithDatabase gives the Server a simulated database: a pool of conns
// connections that every Allocate queries after its CPU work, holding one
// connection for latency (a timer wait, which burns no CPU) before it
// touches the stock. With it the service is I/O-bound: at most conns
// queries run at once, so it serves at most conns/latency calls per second
// however many CPUs it has, and the calls beyond that wait for a connection
// in arrival order.
//
// Unlike the CPU work, the database watches the call's context: a call
// whose context ends while it waits for a connection or during its query
// ends with DEADLINE_EXCEEDED or CANCELED and changes nothing (the
// transaction is rolled back). Stats reports the pool's use (the DB
// fields).
//
// Default: no database. latency 0 makes the pool a pure bound on
// concurrent queries. NewServer fails when conns < 1 or latency < 0.
func WithDatabase(conns int, latency time.Duration) Option {
	return func(o *options) { o.dbConns, o.dbLatency, o.dbSet = conns, latency, true }
}

// WithAllocPerCall makes each Allocate hold size bytes for as long as it
// runs, as a handler holding a large decoded payload does: it allocates
// them when it starts, writes to every page (so that the memory is
// resident, not merely reserved), and keeps them until it returns —
// across its database wait with WithDatabase. Default 0: nothing beyond
// what a call needs. NewServer fails when size is negative.
func WithAllocPerCall(size int64) Option {
	return func(o *options) { o.allocSize = size }
}
