package inventory

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
)

// forever is a query latency no test waits out: a call in such a query ends
// only when its context does.
const forever = time.Hour

// pending is an Allocate running in its own goroutine.
type pending struct {
	resp *inventoryv1.AllocateResponse
	err  error
	done chan struct{}
}

func startAllocate(srv *Server, ctx context.Context, req *inventoryv1.AllocateRequest) *pending {
	p := &pending{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.resp, p.err = srv.Allocate(ctx, req)
	}()
	return p
}

// waitStats polls srv.Stats until cond holds. The generous timeout only
// keeps a broken test from hanging; nothing is asserted about time.
func waitStats(t *testing.T, srv *Server, what string, cond func(Stats) bool) {
	t.Helper()
	giveUp := time.Now().Add(30 * time.Second)
	for !cond(srv.Stats()) {
		if time.Now().After(giveUp) {
			t.Fatalf("Stats never showed %s: %+v", what, srv.Stats())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// expiring is a context whose deadline passes when the test calls expire,
// not at an instant of the wall clock. It has no Deadline.
type expiring struct {
	context.Context // Background, for Value and Deadline
	done            chan struct{}
	once            sync.Once
}

func newExpiring() *expiring {
	return &expiring{Context: context.Background(), done: make(chan struct{})}
}

func (c *expiring) Done() <-chan struct{} { return c.done }

func (c *expiring) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (c *expiring) expire() { c.once.Do(func() { close(c.done) }) }

// parkedInAcquire counts the goroutines blocked in database.acquire's wait
// for a connection, read from a dump of all goroutines: unlike
// Stats.DBWaiting, which a call raises just before it blocks, it counts
// only calls already in the channel's queue.
func parkedInAcquire() int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	parked := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, " [select") && strings.Contains(g, ".(*database).acquire(") {
			parked++
		}
	}
	return parked
}

// fakeClock is a clock that moves only when told.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestDatabaseBoundsConcurrency sends many more concurrent Allocate calls
// over gRPC than the pool has connections and checks that no more than
// conns queries ever ran at once. Each query holds its connection for at
// least the latency, so the calls cannot all have finished in less than
// calls/conns latencies: a pool that let more through could.
func TestDatabaseBoundsConcurrency(t *testing.T) {
	const (
		conns   = 3
		calls   = 48
		latency = 2 * time.Millisecond
	)
	srv := newServer(t, WithStock("A", 1000), WithWorkIterations(0), WithDatabase(conns, latency))
	c := client(t, srv)

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
	)
	start := time.Now()
	for i := 0; i < calls; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			callStart := time.Now()
			_, err := c.Allocate(context.Background(), &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: fmt.Sprintf("o%d", i)})
			took := time.Since(callStart)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, fmt.Sprintf("Allocate(o%d) = %v, want success", i, err))
			}
			if took < latency {
				failures = append(failures, fmt.Sprintf("Allocate(o%d) took %v, want at least the query latency %v", i, took, latency))
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, f := range failures {
		t.Error(f)
	}

	if min := calls / conns * latency; elapsed < min {
		t.Errorf("%d calls through %d connections of %v took %v, want at least %v", calls, conns, latency, elapsed, min)
	}
	st := srv.Stats()
	if st.DBConns != conns {
		t.Errorf("Stats.DBConns = %d, want %d", st.DBConns, conns)
	}
	if st.DBPeakInUse < 1 || st.DBPeakInUse > conns {
		t.Errorf("Stats.DBPeakInUse = %d, want 1..%d", st.DBPeakInUse, conns)
	}
	if st.DBInUse != 0 || st.DBWaiting != 0 {
		t.Errorf("after the calls, Stats DBInUse/DBWaiting = %d/%d, want 0/0", st.DBInUse, st.DBWaiting)
	}
	if st.DBQueries != calls || st.Allocated != calls || st.DBGaveUp != 0 || st.DBCutShort != 0 {
		t.Errorf("Stats DBQueries/Allocated/DBGaveUp/DBCutShort = %d/%d/%d/%d, want %d/%d/0/0",
			st.DBQueries, st.Allocated, st.DBGaveUp, st.DBCutShort, calls, calls)
	}
	if st.DBWaited > calls || (st.DBWaited == 0) != (st.DBWaitTime == 0) {
		t.Errorf("Stats DBWaited/DBWaitTime = %d/%v, want at most %d calls, and time only if calls waited", st.DBWaited, st.DBWaitTime, calls)
	}
	if got := level(t, srv, "A"); got.Available != 1000-calls || got.Allocated != calls {
		t.Errorf("Stock(A) = %+v, want Available %d, Allocated %d", got, 1000-calls, calls)
	}
}

// TestDatabasePeakIsPoolSize holds every connection with calls whose
// queries never end by themselves, queues more behind them, and checks the
// gauges at that instant: exactly conns in use, the rest waiting.
func TestDatabasePeakIsPoolSize(t *testing.T) {
	const conns, calls = 2, 6
	srv := newServer(t, WithStock("A", 100), WithWorkIterations(0), WithDatabase(conns, forever))
	// Separate contexts, so that the waiters give up while the holders
	// still hold every connection, and none can slip into a freed one.
	holdCtx, stopHolding := context.WithCancel(context.Background())
	defer stopHolding()
	waitCtx, stopWaiting := context.WithCancel(context.Background())
	defer stopWaiting()
	var holders, waiters []*pending
	for i := 0; i < conns; i++ {
		holders = append(holders, startAllocate(srv, holdCtx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: fmt.Sprintf("h%d", i)}))
	}
	waitStats(t, srv, "every connection in use", func(st Stats) bool { return st.DBInUse == conns })
	for i := conns; i < calls; i++ {
		waiters = append(waiters, startAllocate(srv, waitCtx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: fmt.Sprintf("w%d", i)}))
	}
	waitStats(t, srv, fmt.Sprintf("%d calls waiting", calls-conns), func(st Stats) bool { return st.DBWaiting == calls-conns })
	if st := srv.Stats(); st.DBInUse != conns || st.DBPeakInUse != conns {
		t.Errorf("with %d calls on %d connections, Stats DBInUse/DBPeakInUse = %d/%d, want %d/%d",
			calls, conns, st.DBInUse, st.DBPeakInUse, conns, conns)
	}

	stopWaiting()
	for _, p := range waiters {
		<-p.done
		if msg := status.Convert(p.err).Message(); status.Code(p.err) != codes.Canceled || !strings.HasPrefix(msg, "inventory: gave up waiting") {
			t.Errorf("waiting Allocate after cancel = %v, want Canceled, gave up waiting", p.err)
		}
	}
	stopHolding()
	for _, p := range holders {
		<-p.done
		if msg := status.Convert(p.err).Message(); status.Code(p.err) != codes.Canceled || !strings.HasPrefix(msg, "inventory: database query cut short") {
			t.Errorf("holding Allocate after cancel = %v, want Canceled, query cut short", p.err)
		}
	}
	st := srv.Stats()
	if st.DBPeakInUse != conns || st.DBInUse != 0 || st.DBWaiting != 0 {
		t.Errorf("Stats DBPeakInUse/DBInUse/DBWaiting = %d/%d/%d, want %d/0/0", st.DBPeakInUse, st.DBInUse, st.DBWaiting, conns)
	}
	if st.DBWaited != calls-conns || st.DBGaveUp != calls-conns || st.DBCutShort != conns || st.DBQueries != 0 {
		t.Errorf("Stats DBWaited/DBGaveUp/DBCutShort/DBQueries = %d/%d/%d/%d, want %d/%d/%d/0",
			st.DBWaited, st.DBGaveUp, st.DBCutShort, st.DBQueries, calls-conns, calls-conns, conns)
	}
	if got, want := level(t, srv, "A"), (StockLevel{SKU: "A", Initial: 100, Available: 100}); got != want {
		t.Errorf("after cancelled calls, Stock(A) = %+v, want %+v", got, want)
	}
}

// TestDatabaseContextEnds ends a call's context at each point where the
// database watches it and checks the status code, that nothing changed and
// that the order id stays free.
func TestDatabaseContextEnds(t *testing.T) {
	tests := []struct {
		name     string
		occupied bool // another call holds the only connection
		// give returns the call's context and, unless it ends by itself,
		// a function that ends it once the stats show endAt.
		give    func() (context.Context, func())
		endAt   func(Stats) bool
		want    codes.Code
		wantMsg string
		wantDB  [2]uint64 // Stats DBGaveUp, DBCutShort counted by the call
	}{
		{
			name: "deadline while waiting for a connection", occupied: true,
			give: func() (context.Context, func()) {
				return context.WithTimeout(context.Background(), 20*time.Millisecond)
			},
			want: codes.DeadlineExceeded, wantMsg: "inventory: gave up waiting for a database connection: ", wantDB: [2]uint64{1, 0},
		},
		{
			name: "deadline during the query",
			give: func() (context.Context, func()) {
				ctx := newExpiring()
				return ctx, ctx.expire
			},
			endAt: func(st Stats) bool { return st.DBInUse == 1 },
			want:  codes.DeadlineExceeded, wantMsg: "inventory: database query cut short: ", wantDB: [2]uint64{0, 1},
		},
		{
			name: "cancelled while waiting for a connection", occupied: true,
			give:  func() (context.Context, func()) { return context.WithCancel(context.Background()) },
			endAt: func(st Stats) bool { return st.DBWaiting == 1 },
			want:  codes.Canceled, wantMsg: "inventory: gave up waiting for a database connection: ", wantDB: [2]uint64{1, 0},
		},
		{
			name:  "cancelled during the query",
			give:  func() (context.Context, func()) { return context.WithCancel(context.Background()) },
			endAt: func(st Stats) bool { return st.DBInUse == 1 },
			want:  codes.Canceled, wantMsg: "inventory: database query cut short: ", wantDB: [2]uint64{0, 1},
		},
		{
			name: "deadline passed before the call, connection free",
			give: func() (context.Context, func()) { return context.WithDeadline(context.Background(), time.Unix(1, 0)) },
			want: codes.DeadlineExceeded, wantMsg: "inventory: gave up waiting for a database connection: ", wantDB: [2]uint64{1, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, WithStock("A", 10), WithWorkIterations(0), WithDatabase(1, forever))
			holderCtx, stopHolder := context.WithCancel(context.Background())
			defer stopHolder()
			var holder *pending
			if tt.occupied {
				holder = startAllocate(srv, holderCtx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: "holder"})
				waitStats(t, srv, "the holder's query", func(st Stats) bool { return st.DBInUse == 1 })
			}
			before := srv.Stats()

			ctx, end := tt.give()
			defer end()
			p := startAllocate(srv, ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 3, OrderId: "o1"})
			if tt.endAt != nil {
				waitStats(t, srv, "the call where its context should end", tt.endAt)
				end()
			}
			<-p.done
			if got := status.Code(p.err); got != tt.want {
				t.Fatalf("Allocate code = %v, want %v (err %v)", got, tt.want, p.err)
			}
			if msg := status.Convert(p.err).Message(); !strings.HasPrefix(msg, tt.wantMsg) {
				t.Errorf("Allocate message = %q, want prefix %q", msg, tt.wantMsg)
			}
			after := srv.Stats()
			if got := [2]uint64{after.DBGaveUp - before.DBGaveUp, after.DBCutShort - before.DBCutShort}; got != tt.wantDB {
				t.Errorf("Stats DBGaveUp/DBCutShort counted %v, want %v", got, tt.wantDB)
			}
			if after.Allocated != 0 || after.DBQueries != 0 {
				t.Errorf("Stats Allocated/DBQueries = %d/%d, want 0/0", after.Allocated, after.DBQueries)
			}
			if tt.want == codes.DeadlineExceeded && after.Late-before.Late != 1 {
				t.Errorf("Stats.Late counted %d, want 1 (the handler ended at its deadline)", after.Late-before.Late)
			}
			if got, want := level(t, srv, "A"), (StockLevel{SKU: "A", Initial: 10, Available: 10}); got != want {
				t.Errorf("after the failed Allocate, Stock(A) = %+v, want %+v", got, want)
			}

			if holder != nil {
				stopHolder()
				<-holder.done
				if got := status.Code(holder.err); got != codes.Canceled {
					t.Errorf("holder's Allocate code = %v, want Canceled", got)
				}
			}
			// The failed order id was not remembered: with a free pool and
			// a short query it is applied, once.
			srv.db.latency = time.Millisecond
			for i := 0; i < 2; i++ {
				resp, err := srv.Allocate(context.Background(), &inventoryv1.AllocateRequest{Sku: "A", Quantity: 3, OrderId: "o1"})
				if err != nil || resp.GetRemaining() != 7 {
					t.Errorf("Allocate(o1) try %d after the failure = %v, %v; want remaining 7", i, resp, err)
				}
			}
			if got, want := level(t, srv, "A"), (StockLevel{SKU: "A", Initial: 10, Available: 7, Allocated: 3}); got != want {
				t.Errorf("after the retries, Stock(A) = %+v, want %+v", got, want)
			}
			if st := srv.Stats(); st.DBInUse != 0 || st.DBWaiting != 0 {
				t.Errorf("at the end, Stats DBInUse/DBWaiting = %d/%d, want 0/0", st.DBInUse, st.DBWaiting)
			}
		})
	}
}

// TestDatabaseWaitsInArrivalOrder queues calls one by one behind a held
// connection and checks that the connection goes to them in that order: the
// call cancelled next is always the one in its query, never one waiting.
func TestDatabaseWaitsInArrivalOrder(t *testing.T) {
	const waiters = 4
	srv := newServer(t, WithStock("A", 100), WithWorkIterations(0), WithDatabase(1, forever))
	var (
		cancels []context.CancelFunc
		ps      []*pending
	)
	for i := 0; i <= waiters; i++ { // call 0 takes the connection
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cancels = append(cancels, cancel)
		ps = append(ps, startAllocate(srv, ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: fmt.Sprintf("o%d", i)}))
		want := int64(i)
		waitStats(t, srv, fmt.Sprintf("call %d queued", i), func(st Stats) bool {
			// The call must be in the channel's queue before the next
			// one starts, not merely counted as waiting.
			return st.DBInUse == 1 && st.DBWaiting == want && parkedInAcquire() == i
		})
	}
	for i := range ps {
		cancels[i]()
		<-ps[i].done
		if msg := status.Convert(ps[i].err).Message(); !strings.HasPrefix(msg, "inventory: database query cut short: ") {
			t.Errorf("call %d, cancelled after the %d before it: %q, want it cut short in its query", i, i, msg)
		}
		if i+1 < len(ps) {
			left := int64(len(ps) - i - 2)
			waitStats(t, srv, fmt.Sprintf("call %d in its query", i+1), func(st Stats) bool { return st.DBInUse == 1 && st.DBWaiting == left })
		}
	}
	if st := srv.Stats(); st.DBCutShort != waiters+1 || st.DBGaveUp != 0 || st.DBWaited != waiters {
		t.Errorf("Stats DBCutShort/DBGaveUp/DBWaited = %d/%d/%d, want %d/0/%d", st.DBCutShort, st.DBGaveUp, st.DBWaited, waiters+1, waiters)
	}
}

// TestDatabaseWaitTime drives the server's clock by hand: three calls wait
// behind a held connection while the clock moves 7ms, then give up.
func TestDatabaseWaitTime(t *testing.T) {
	srv := newServer(t, WithStock("A", 100), WithWorkIterations(0), WithDatabase(1, forever))
	clock := &fakeClock{}
	clock.advance(time.Hour) // any instant
	srv.now = clock.now

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder := startAllocate(srv, ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: "holder"})
	waitStats(t, srv, "the holder's query", func(st Stats) bool { return st.DBInUse == 1 })
	if st := srv.Stats(); st.DBWaited != 0 || st.DBWaitTime != 0 {
		t.Errorf("after a call served at once, Stats DBWaited/DBWaitTime = %d/%v, want 0/0", st.DBWaited, st.DBWaitTime)
	}

	waitCtx, stopWaiting := context.WithCancel(context.Background())
	defer stopWaiting()
	var ps []*pending
	for i := 0; i < 3; i++ {
		ps = append(ps, startAllocate(srv, waitCtx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: fmt.Sprintf("o%d", i)}))
	}
	waitStats(t, srv, "three calls waiting", func(st Stats) bool { return st.DBWaiting == 3 })
	clock.advance(7 * time.Millisecond)
	stopWaiting()
	for _, p := range ps {
		<-p.done
		if got := status.Code(p.err); got != codes.Canceled {
			t.Errorf("waiting Allocate after cancel: code = %v, want Canceled", got)
		}
	}
	if st := srv.Stats(); st.DBWaited != 3 || st.DBWaitTime != 21*time.Millisecond || st.DBGaveUp != 3 {
		t.Errorf("Stats DBWaited/DBWaitTime/DBGaveUp = %d/%v/%d, want 3/21ms/3", st.DBWaited, st.DBWaitTime, st.DBGaveUp)
	}
	cancel()
	<-holder.done
}

// TestDatabaseIdempotent sends the same order many times at once through a
// pool smaller than the burst, after an attempt of it that failed in its
// query, and checks it was applied exactly once.
func TestDatabaseIdempotent(t *testing.T) {
	const copies = 8
	srv := newServer(t, WithStock("A", 100), WithWorkIterations(0), WithDatabase(2, forever))
	req := &inventoryv1.AllocateRequest{Sku: "A", Quantity: 5, OrderId: "order-1"}

	ctx := newExpiring()
	first := startAllocate(srv, ctx, req)
	waitStats(t, srv, "the first attempt in its query", func(st Stats) bool { return st.DBInUse == 1 })
	ctx.expire()
	<-first.done
	if got := status.Code(first.err); got != codes.DeadlineExceeded {
		t.Fatalf("Allocate(order-1) whose deadline passed during its query: code = %v, want DeadlineExceeded", got)
	}

	srv.db.latency = time.Millisecond // no call runs: safe to change
	c := client(t, srv)
	var (
		wg    sync.WaitGroup
		resps [copies]*inventoryv1.AllocateResponse
		errs  [copies]error
	)
	for i := range resps {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resps[i], errs[i] = c.Allocate(context.Background(), req)
		}(i)
	}
	wg.Wait()
	want := &inventoryv1.AllocateResponse{OrderId: "order-1", Sku: "A", Quantity: 5, Remaining: 95}
	for i := range resps {
		if errs[i] != nil || !sameAllocate(resps[i], want) {
			t.Errorf("copy %d of Allocate(order-1) = %v, %v; want %v", i, resps[i], errs[i], want)
		}
	}
	if got, want := level(t, srv, "A"), (StockLevel{SKU: "A", Initial: 100, Available: 95, Allocated: 5}); got != want {
		t.Errorf("Stock(A) = %+v, want %+v", got, want)
	}
	st := srv.Stats()
	if st.Allocated != 1 || st.Replayed != copies-1 || st.DBCutShort != 1 || st.DBQueries != copies {
		t.Errorf("Stats Allocated/Replayed/DBCutShort/DBQueries = %d/%d/%d/%d, want 1/%d/1/%d",
			st.Allocated, st.Replayed, st.DBCutShort, st.DBQueries, copies-1, copies)
	}
	if st.DBPeakInUse > 2 {
		t.Errorf("Stats.DBPeakInUse = %d, want at most 2", st.DBPeakInUse)
	}
}

func TestNoDatabaseByDefault(t *testing.T) {
	srv := newServer(t, WithStock("A", 10), WithWorkIterations(0))
	if srv.db != nil {
		t.Fatalf("NewServer without WithDatabase has a database")
	}
	// A call whose context has ended still runs: only the database watches
	// the context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if resp, err := srv.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: "o1"}); err != nil || resp.GetRemaining() != 9 {
		t.Errorf("Allocate with a cancelled context and no database = %v, %v; want remaining 9", resp, err)
	}
	if st := srv.Stats(); st != (Stats{Calls: 1, Canceled: 1, Allocated: 1, PeakInFlight: 1}) {
		t.Errorf("Stats = %+v, want only Calls, Canceled, Allocated and PeakInFlight set", st)
	}
}

func TestDatabaseZeroLatency(t *testing.T) {
	srv := newServer(t, WithStock("A", 10), WithWorkIterations(0), WithDatabase(1, 0))
	if resp, err := srv.Allocate(context.Background(), &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: "o1"}); err != nil || resp.GetRemaining() != 9 {
		t.Errorf("Allocate with a zero-latency database = %v, %v; want remaining 9", resp, err)
	}
	if st := srv.Stats(); st.DBQueries != 1 || st.DBPeakInUse != 1 || st.DBInUse != 0 {
		t.Errorf("Stats DBQueries/DBPeakInUse/DBInUse = %d/%d/%d, want 1/1/0", st.DBQueries, st.DBPeakInUse, st.DBInUse)
	}
}
