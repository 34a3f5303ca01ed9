package inventory

import (
	"context"
	"fmt"
	"math"
	"net"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serve runs srv (registered with Register) on an in-memory listener and
// returns a client connection; both are stopped when the test ends.
func serve(t *testing.T, srv *Server, sopts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(sopts...)
	Register(gs, srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		<-served
	})
	return conn
}

// newServer returns NewServer(opts...), failing the test on an error.
func newServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	srv, err := NewServer(opts...)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	return srv
}

func client(t *testing.T, srv *Server) inventoryv1.InventoryServiceClient {
	t.Helper()
	return inventoryv1.NewInventoryServiceClient(serve(t, srv))
}

func level(t *testing.T, srv *Server, sku string) StockLevel {
	t.Helper()
	lvl, ok := srv.Stock(sku)
	if !ok {
		t.Fatalf("Server.Stock(%q): not found", sku)
	}
	return lvl
}

func TestAllocateRefusals(t *testing.T) {
	tests := []struct {
		name string
		give *inventoryv1.AllocateRequest
		want codes.Code
	}{
		{name: "empty sku", give: &inventoryv1.AllocateRequest{Quantity: 1, OrderId: "o1"}, want: codes.InvalidArgument},
		{name: "empty order id", give: &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1}, want: codes.InvalidArgument},
		{name: "zero quantity", give: &inventoryv1.AllocateRequest{Sku: "A", OrderId: "o1"}, want: codes.InvalidArgument},
		{name: "negative quantity", give: &inventoryv1.AllocateRequest{Sku: "A", Quantity: -3, OrderId: "o1"}, want: codes.InvalidArgument},
		{name: "unknown sku", give: &inventoryv1.AllocateRequest{Sku: "nope", Quantity: 1, OrderId: "o1"}, want: codes.NotFound},
		{name: "more than the stock", give: &inventoryv1.AllocateRequest{Sku: "A", Quantity: 11, OrderId: "o1"}, want: codes.FailedPrecondition},
		{name: "conflicting retry, other quantity", give: &inventoryv1.AllocateRequest{Sku: "A", Quantity: 2, OrderId: "taken"}, want: codes.AlreadyExists},
		{name: "conflicting retry, other sku", give: &inventoryv1.AllocateRequest{Sku: "B", Quantity: 1, OrderId: "taken"}, want: codes.AlreadyExists},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, WithStock("A", 10), WithStock("B", 5), WithWorkIterations(0))
			c := client(t, srv)
			ctx := context.Background()
			if _, err := c.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: "taken"}); err != nil {
				t.Fatalf("Allocate(taken) = %v, want success", err)
			}
			before := srv.Stats()
			wantA, wantB := level(t, srv, "A"), level(t, srv, "B")

			_, err := c.Allocate(ctx, tt.give)
			if got := status.Code(err); got != tt.want {
				t.Fatalf("Allocate(%v) code = %v, want %v (err %v)", tt.give, got, tt.want, err)
			}
			if !strings.HasPrefix(status.Convert(err).Message(), "inventory: ") {
				t.Errorf("Allocate(%v) message = %q, want prefix %q", tt.give, status.Convert(err).Message(), "inventory: ")
			}
			if got := level(t, srv, "A"); got != wantA {
				t.Errorf("after refused Allocate, Stock(A) = %+v, want %+v", got, wantA)
			}
			if got := level(t, srv, "B"); got != wantB {
				t.Errorf("after refused Allocate, Stock(B) = %+v, want %+v", got, wantB)
			}
			after := srv.Stats()
			if after.Allocated != before.Allocated || after.Replayed != before.Replayed {
				t.Errorf("after refused Allocate, Stats Allocated/Replayed = %d/%d, want %d/%d",
					after.Allocated, after.Replayed, before.Allocated, before.Replayed)
			}
			refusals := (after.Rejected - before.Rejected) + (after.OutOfStock - before.OutOfStock)
			if refusals != 1 {
				t.Errorf("refused Allocate counted %d times in Rejected+OutOfStock, want 1", refusals)
			}
		})
	}
}

func TestAllocateRefusalIsNotRemembered(t *testing.T) {
	srv := newServer(t, WithStock("A", 5), WithWorkIterations(0))
	c := client(t, srv)
	ctx := context.Background()

	_, err := c.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 6, OrderId: "o1"})
	if got := status.Code(err); got != codes.FailedPrecondition {
		t.Fatalf("Allocate(6 of 5) code = %v, want FailedPrecondition", got)
	}
	// The refused order id is free: the same id may be used for a request
	// that fits.
	resp, err := c.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 5, OrderId: "o1"})
	if err != nil {
		t.Fatalf("Allocate(5 of 5) after a refusal = %v, want success", err)
	}
	if resp.GetRemaining() != 0 {
		t.Errorf("Allocate(5 of 5).Remaining = %d, want 0", resp.GetRemaining())
	}
	_, err = c.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: "o2"})
	if got := status.Code(err); got != codes.FailedPrecondition {
		t.Fatalf("Allocate(1 of 0) code = %v, want FailedPrecondition", got)
	}
	if got, want := level(t, srv, "A"), (StockLevel{SKU: "A", Initial: 5, Available: 0, Allocated: 5}); got != want {
		t.Errorf("Stock(A) = %+v, want %+v", got, want)
	}
}

func TestAllocateIsIdempotent(t *testing.T) {
	srv := newServer(t, WithStock("A", 100), WithWorkIterations(0))
	c := client(t, srv)
	ctx := context.Background()
	req := &inventoryv1.AllocateRequest{Sku: "A", Quantity: 7, OrderId: "order-1"}

	first, err := c.Allocate(ctx, req)
	if err != nil {
		t.Fatalf("Allocate(order-1) = %v, want success", err)
	}
	want := &inventoryv1.AllocateResponse{OrderId: "order-1", Sku: "A", Quantity: 7, Remaining: 93}
	if !sameAllocate(first, want) {
		t.Fatalf("Allocate(order-1) = %v, want %v", first, want)
	}
	// Another order moves the stock, so a wrong replay would show.
	if _, err := c.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 3, OrderId: "order-2"}); err != nil {
		t.Fatalf("Allocate(order-2) = %v, want success", err)
	}
	for i := 0; i < 3; i++ {
		again, err := c.Allocate(ctx, req)
		if err != nil {
			t.Fatalf("retry %d of Allocate(order-1) = %v, want success", i, err)
		}
		if !sameAllocate(again, first) {
			t.Errorf("retry %d of Allocate(order-1) = %v, want the first answer %v", i, again, first)
		}
	}
	if got, want := level(t, srv, "A"), (StockLevel{SKU: "A", Initial: 100, Available: 90, Allocated: 10}); got != want {
		t.Errorf("after retries, Stock(A) = %+v, want %+v", got, want)
	}

	// Released, the order still answers a retry with its first answer and
	// is not applied again.
	if _, err := c.Release(ctx, &inventoryv1.ReleaseRequest{OrderId: "order-1"}); err != nil {
		t.Fatalf("Release(order-1) = %v, want success", err)
	}
	again, err := c.Allocate(ctx, req)
	if err != nil || !sameAllocate(again, first) {
		t.Errorf("Allocate(order-1) after Release = %v, %v; want %v, nil", again, err, first)
	}
	if got, want := level(t, srv, "A"), (StockLevel{SKU: "A", Initial: 100, Available: 97, Allocated: 3}); got != want {
		t.Errorf("after Release and retry, Stock(A) = %+v, want %+v", got, want)
	}
	st := srv.Stats()
	if st.Allocated != 2 || st.Replayed != 4 {
		t.Errorf("Stats Allocated/Replayed = %d/%d, want 2/4", st.Allocated, st.Replayed)
	}
}

func sameAllocate(a, b *inventoryv1.AllocateResponse) bool {
	return a.GetOrderId() == b.GetOrderId() && a.GetSku() == b.GetSku() &&
		a.GetQuantity() == b.GetQuantity() && a.GetRemaining() == b.GetRemaining()
}

func TestRelease(t *testing.T) {
	srv := newServer(t, WithStock("A", 10), WithWorkIterations(0))
	c := client(t, srv)
	ctx := context.Background()
	if _, err := c.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 4, OrderId: "o1"}); err != nil {
		t.Fatalf("Allocate(o1) = %v, want success", err)
	}

	tests := []struct {
		name     string
		give     string
		wantCode codes.Code
		want     *inventoryv1.ReleaseResponse
		wantLvl  StockLevel
	}{
		{name: "first release returns the stock", give: "o1",
			want:    &inventoryv1.ReleaseResponse{OrderId: "o1", Sku: "A", Quantity: 4, Released: true, Available: 10},
			wantLvl: StockLevel{SKU: "A", Initial: 10, Available: 10}},
		{name: "second release changes nothing", give: "o1",
			want:    &inventoryv1.ReleaseResponse{OrderId: "o1", Sku: "A", Quantity: 0, Released: false, Available: 10},
			wantLvl: StockLevel{SKU: "A", Initial: 10, Available: 10}},
		{name: "unknown order", give: "o2", wantCode: codes.NotFound,
			wantLvl: StockLevel{SKU: "A", Initial: 10, Available: 10}},
		{name: "empty order id", give: "", wantCode: codes.InvalidArgument,
			wantLvl: StockLevel{SKU: "A", Initial: 10, Available: 10}},
	}
	// Steps run in order against the same server.
	for _, tt := range tests {
		got, err := c.Release(ctx, &inventoryv1.ReleaseRequest{OrderId: tt.give})
		if code := status.Code(err); code != tt.wantCode {
			t.Fatalf("%s: Release(%q) code = %v, want %v (err %v)", tt.name, tt.give, code, tt.wantCode, err)
		}
		if tt.want != nil && (got.GetOrderId() != tt.want.OrderId || got.GetSku() != tt.want.Sku ||
			got.GetQuantity() != tt.want.Quantity || got.GetReleased() != tt.want.Released ||
			got.GetAvailable() != tt.want.Available) {
			t.Errorf("%s: Release(%q) = %v, want %v", tt.name, tt.give, got, tt.want)
		}
		if lvl := level(t, srv, "A"); lvl != tt.wantLvl {
			t.Errorf("%s: after Release(%q), Stock(A) = %+v, want %+v", tt.name, tt.give, lvl, tt.wantLvl)
		}
	}
	if st := srv.Stats(); st.Released != 1 {
		t.Errorf("Stats.Released = %d, want 1", st.Released)
	}
}

func TestGetStock(t *testing.T) {
	srv := newServer(t, WithStock("A", 10), WithStock("B", 0), WithWorkIterations(0))
	c := client(t, srv)
	ctx := context.Background()
	if _, err := c.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 3, OrderId: "o1"}); err != nil {
		t.Fatalf("Allocate(o1) = %v, want success", err)
	}
	tests := []struct {
		name     string
		give     string
		want     int64
		wantCode codes.Code
	}{
		{name: "after an allocation", give: "A", want: 7},
		{name: "empty stock", give: "B", want: 0},
		{name: "unknown sku", give: "C", wantCode: codes.NotFound},
		{name: "empty sku", give: "", wantCode: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.GetStock(ctx, &inventoryv1.GetStockRequest{Sku: tt.give})
			if code := status.Code(err); code != tt.wantCode {
				t.Fatalf("GetStock(%q) code = %v, want %v (err %v)", tt.give, code, tt.wantCode, err)
			}
			if err == nil && (got.GetAvailable() != tt.want || got.GetSku() != tt.give) {
				t.Errorf("GetStock(%q) = %v, want sku %q available %d", tt.give, got, tt.give, tt.want)
			}
		})
	}
}

func TestGetStockWithReadWork(t *testing.T) {
	srv := newServer(t, WithStock("A", 10), WithWorkIterations(0), WithStockReadWork(50*time.Microsecond))
	got, err := client(t, srv).GetStock(context.Background(), &inventoryv1.GetStockRequest{Sku: "A"})
	if err != nil || got.GetAvailable() != 10 {
		t.Fatalf("GetStock(A) with WithStockReadWork(50µs) = %v, %v; want available 10", got, err)
	}
	if got := srv.StockReadIterations(); got < 1 {
		t.Errorf("StockReadIterations() with WithStockReadWork(50µs) = %d, want >= 1", got)
	}
}

// TestConcurrentNeverOversells drives thousands of concurrent Allocate,
// retried Allocate and Release calls over gRPC at a stock far smaller than the
// demand, then checks that no SKU went negative and that the stock the server
// holds for live orders is exactly what the clients were told they got.
func TestConcurrentNeverOversells(t *testing.T) {
	const (
		workers  = 32
		perWork  = 60 // orders per worker; each is sent twice at once
		initialA = 150
		initialB = 40
	)
	srv := newServer(t, WithStock("A", initialA), WithStock("B", initialB), WithWorkIterations(2))
	c := client(t, srv)
	ctx := context.Background()

	type result struct {
		sku      string
		quantity int32
		live     bool // allocated and not released by this test
	}
	var (
		mu       sync.Mutex
		orders   = make(map[string]result)
		failures []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}

	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWork; i++ {
				sku := "A"
				if (w+i)%3 == 0 {
					sku = "B"
				}
				req := &inventoryv1.AllocateRequest{Sku: sku, Quantity: int32(1 + (w*7+i)%4), OrderId: fmt.Sprintf("w%d-o%d", w, i)}
				// The same request twice at once, as a client retry racing
				// its original.
				var (
					resps [2]*inventoryv1.AllocateResponse
					errs  [2]error
					pair  sync.WaitGroup
				)
				for k := range resps {
					pair.Add(1)
					go func(k int) {
						defer pair.Done()
						resps[k], errs[k] = c.Allocate(ctx, req)
					}(k)
				}
				pair.Wait()
				ok := false
				for k := range resps {
					switch code := status.Code(errs[k]); code {
					case codes.OK:
						ok = true
						if resps[k].GetRemaining() < 0 {
							fail("Allocate(%s).Remaining = %d, want >= 0", req.OrderId, resps[k].GetRemaining())
						}
					case codes.FailedPrecondition:
					default:
						fail("Allocate(%s) code = %v, want OK or FailedPrecondition", req.OrderId, code)
					}
				}
				if errs[0] == nil && errs[1] == nil && !sameAllocate(resps[0], resps[1]) {
					fail("concurrent Allocate(%s) answers differ: %v and %v", req.OrderId, resps[0], resps[1])
				}
				if !ok {
					continue
				}
				live := true
				if i%2 == 0 { // release half the orders, some of them twice
					rel, err := c.Release(ctx, &inventoryv1.ReleaseRequest{OrderId: req.OrderId})
					if err != nil || !rel.GetReleased() || rel.GetQuantity() != req.Quantity {
						fail("Release(%s) = %v, %v; want released %d", req.OrderId, rel, err, req.Quantity)
					}
					if i%4 == 0 {
						rel, err := c.Release(ctx, &inventoryv1.ReleaseRequest{OrderId: req.OrderId})
						if err != nil || rel.GetReleased() || rel.GetQuantity() != 0 {
							fail("second Release(%s) = %v, %v; want released false, quantity 0", req.OrderId, rel, err)
						}
					}
					live = false
				}
				mu.Lock()
				orders[req.OrderId] = result{sku: sku, quantity: req.Quantity, live: live}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}

	liveUnits := map[string]int64{}
	for _, o := range orders {
		if o.live {
			liveUnits[o.sku] += int64(o.quantity)
		}
	}
	for _, tc := range []struct {
		sku     string
		initial int64
	}{{"A", initialA}, {"B", initialB}} {
		lvl := level(t, srv, tc.sku)
		if lvl.Available < 0 || lvl.Allocated < 0 || lvl.Committed != 0 {
			t.Errorf("Stock(%s) = %+v, want Available, Allocated >= 0 and Committed 0", tc.sku, lvl)
		}
		if lvl.Initial != tc.initial || lvl.Available+lvl.Allocated != tc.initial {
			t.Errorf("Stock(%s) = %+v, want Initial %d == Available + Allocated", tc.sku, lvl, tc.initial)
		}
		if lvl.Allocated != liveUnits[tc.sku] {
			t.Errorf("Stock(%s).Allocated = %d, want %d (the live orders' units the clients were granted)", tc.sku, lvl.Allocated, liveUnits[tc.sku])
		}
	}
	st := srv.Stats()
	if st.Allocated != uint64(len(orders)) {
		t.Errorf("Stats.Allocated = %d, want %d (orders granted, each applied once)", st.Allocated, len(orders))
	}
	if st.InFlight != 0 || st.PeakInFlight < 1 {
		t.Errorf("Stats InFlight/PeakInFlight = %d/%d, want 0/>=1", st.InFlight, st.PeakInFlight)
	}
	// The demand (about 2.5 units × 1920 orders) far exceeds the stock, so
	// the test must have seen refusals; otherwise it proved nothing.
	if st.OutOfStock == 0 {
		t.Errorf("Stats.OutOfStock = 0, want > 0: the test did not exhaust the stock")
	}
}

func TestOrderMemoryForgetsOldest(t *testing.T) {
	srv := newServer(t, WithStock("A", 100), WithWorkIterations(0), WithOrderMemory(2))
	c := client(t, srv)
	ctx := context.Background()
	alloc := func(id string, q int32) *inventoryv1.AllocateResponse {
		t.Helper()
		resp, err := c.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: q, OrderId: id})
		if err != nil {
			t.Fatalf("Allocate(%s, %d) = %v, want success", id, q, err)
		}
		return resp
	}
	alloc("o1", 1)
	alloc("o2", 2)
	if _, err := c.Release(ctx, &inventoryv1.ReleaseRequest{OrderId: "o2"}); err != nil {
		t.Fatalf("Release(o2) = %v, want success", err)
	}
	alloc("o3", 4) // forgets o1, still live: its unit is committed
	alloc("o4", 8) // forgets o2, released: nothing committed

	if got, want := level(t, srv, "A"), (StockLevel{SKU: "A", Initial: 100, Available: 87, Allocated: 12, Committed: 1}); got != want {
		t.Errorf("Stock(A) = %+v, want %+v", got, want)
	}
	for _, id := range []string{"o1", "o2"} {
		_, err := c.Release(ctx, &inventoryv1.ReleaseRequest{OrderId: id})
		if got := status.Code(err); got != codes.NotFound {
			t.Errorf("Release(%s) of a forgotten order code = %v, want NotFound", id, got)
		}
	}
	// Still remembered: replayed.
	if got := alloc("o4", 8); got.GetRemaining() != 87 {
		t.Errorf("retry of Allocate(o4).Remaining = %d, want 87 (the first answer)", got.GetRemaining())
	}
	// Forgotten: applied again, as documented.
	if got := alloc("o1", 1); got.GetRemaining() != 86 {
		t.Errorf("Allocate(o1) after it was forgotten .Remaining = %d, want 86", got.GetRemaining())
	}
	if st := srv.Stats(); st.Forgotten != 3 || st.Allocated != 5 || st.Replayed != 1 {
		t.Errorf("Stats Forgotten/Allocated/Replayed = %d/%d/%d, want 3/5/1", st.Forgotten, st.Allocated, st.Replayed)
	}
}

// TestHugeOrderMemory: an order memory as large as an int holds (the
// caller's "never forget") is a bound, not memory taken up front: before,
// NewServer made the whole ring at once and panicked (makeslice: len out of
// range), or asked for 16 bytes an id up front, where the options
// promise an error for a bad value and take any n >= 1.
func TestHugeOrderMemory(t *testing.T) {
	var srv *Server
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("NewServer(WithOrderMemory(math.MaxInt)) panicked: %v", r)
			}
		}()
		var err error
		srv, err = NewServer(WithStock("A", 100), WithWorkIterations(0), WithOrderMemory(math.MaxInt))
		if err != nil {
			t.Fatalf("NewServer(WithOrderMemory(math.MaxInt)) = %v, want a server", err)
		}
	}()
	ctx := context.Background()
	for i := range 5 {
		if _, err := srv.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: strconv.Itoa(i)}); err != nil {
			t.Fatalf("Allocate(%d) = %v, want success", i, err)
		}
	}
	// Every order is remembered: a retry of the first is replayed.
	resp, err := srv.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: "0"})
	if err != nil || resp.GetRemaining() != 99 {
		t.Fatalf("retry of Allocate(0) = %v, %v, want the first answer (99 remaining)", resp, err)
	}
	if st := srv.Stats(); st.Forgotten != 0 || st.Replayed != 1 {
		t.Errorf("Stats Forgotten/Replayed = %d/%d, want 0/1", st.Forgotten, st.Replayed)
	}
}

// TestWastedWorkCounted has the handler finish only after the caller's
// deadline has passed and the caller has given up (a hook waits for the
// deadline itself, then for the test to release it), and checks that the
// server counts that run as late, and that it still applied the order.
func TestWastedWorkCounted(t *testing.T) {
	srv := newServer(t, WithStock("A", 10), WithWorkIterations(1))
	release := make(chan struct{})
	srv.afterWork = func(ctx context.Context) {
		if dl, ok := ctx.Deadline(); ok {
			// The client's cancellation (RST_STREAM at its own deadline)
			// can end the context a little before the server's deadline,
			// which comes from the grpc-timeout header and so falls later;
			// a handler that stopped then would rightly count as canceled.
			// This one overruns the deadline, and answers only after the
			// client has seen its call fail, so that no answer can beat the
			// client's own deadline timer.
			<-time.After(time.Until(dl))
			<-release
		}
	}
	finished := make(chan struct{}, 4)
	notify := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		finished <- struct{}{}
		return resp, err
	}
	c := inventoryv1.NewInventoryServiceClient(serve(t, srv, grpc.UnaryInterceptor(notify)))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := c.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 2, OrderId: "late"})
	close(release)
	if got := status.Code(err); got != codes.DeadlineExceeded {
		t.Fatalf("Allocate with a deadline the handler overruns: code = %v, want DeadlineExceeded", got)
	}
	<-finished
	if st := srv.Stats(); st.Late != 1 || st.Canceled != 0 || st.Wasted() != 1 || st.Calls != 1 {
		t.Errorf("after a late handler, Stats Late/Canceled/Wasted/Calls = %d/%d/%d/%d, want 1/0/1/1",
			st.Late, st.Canceled, st.Wasted(), st.Calls)
	}
	// The work was done and applied although nobody got the answer.
	if got := level(t, srv, "A").Available; got != 8 {
		t.Errorf("Stock(A).Available after the late Allocate = %d, want 8", got)
	}

	// A call without a deadline is not late.
	if _, err := c.Allocate(context.Background(), &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: "on-time"}); err != nil {
		t.Fatalf("Allocate(on-time) = %v, want success", err)
	}
	<-finished
	if st := srv.Stats(); st.Late != 1 || st.Calls != 2 {
		t.Errorf("after an on-time handler, Stats Late/Calls = %d/%d, want 1/2", st.Late, st.Calls)
	}
}

func TestEndClassifiesFinishedRuns(t *testing.T) {
	past, cancelPast := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancelPast()
	future, cancelFuture := context.WithTimeout(context.Background(), time.Hour)
	defer cancelFuture()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	tests := []struct {
		name         string
		give         context.Context
		wantLate     uint64
		wantCanceled uint64
	}{
		{name: "no deadline", give: context.Background()},
		{name: "deadline ahead", give: future},
		{name: "deadline passed", give: past, wantLate: 1},
		{name: "caller cancelled", give: canceled, wantCanceled: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, WithStock("A", 10), WithWorkIterations(0))
			resp, err := srv.Allocate(tt.give, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: "o"})
			if err != nil || resp.GetRemaining() != 9 {
				t.Fatalf("Server.Allocate = %v, %v; want remaining 9 (the handler ignores its context)", resp, err)
			}
			st := srv.Stats()
			if st.Late != tt.wantLate || st.Canceled != tt.wantCanceled || st.Calls != 1 {
				t.Errorf("Stats Late/Canceled/Calls = %d/%d/%d, want %d/%d/1", st.Late, st.Canceled, st.Calls, tt.wantLate, tt.wantCanceled)
			}
		})
	}
}

func TestHealthAndReflection(t *testing.T) {
	conn := serve(t, newServer(t, WithWorkIterations(0)))
	ctx := context.Background()

	hc := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", ServiceName} {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Health.Check(%q) = %v, %v; want SERVING", svc, resp, err)
		}
	}

	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("ServerReflectionInfo: %v", err)
	}
	defer stream.CloseSend()
	ask := func(req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatalf("reflection Send: %v", err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("reflection Recv: %v", err)
		}
		return resp
	}

	list := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	got := map[string]bool{}
	for _, s := range list.GetListServicesResponse().GetService() {
		got[s.GetName()] = true
	}
	for _, want := range []string{ServiceName, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} {
		if !got[want] {
			t.Errorf("reflection ListServices = %v, want it to include %q", got, want)
		}
	}

	files := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: ServiceName + ".Allocate"}})
	if fd := files.GetFileDescriptorResponse(); fd == nil || len(fd.GetFileDescriptorProto()) == 0 {
		t.Errorf("reflection FileContainingSymbol(%s.Allocate) = %v, want a file descriptor", ServiceName, files)
	}
}

func TestServiceName(t *testing.T) {
	if want := inventoryv1.InventoryService_ServiceDesc.ServiceName; ServiceName != want {
		t.Errorf("ServiceName = %q, want %q", ServiceName, want)
	}
}

func TestNewServerDefaults(t *testing.T) {
	srv := newServer(t)
	if got, want := strings.Join(srv.SKUs(), ","), strings.Join(DefaultSKUs(), ","); got != want {
		t.Errorf("NewServer().SKUs() = %s, want %s", got, want)
	}
	for _, sku := range DefaultSKUs() {
		if got, want := level(t, srv, sku), (StockLevel{SKU: sku, Initial: DefaultStock, Available: DefaultStock}); got != want {
			t.Errorf("NewServer().Stock(%q) = %+v, want %+v", sku, got, want)
		}
	}
	if got, want := srv.WorkIterations(), iterationsFor(DefaultCPUWork); got != want || got < 1 {
		t.Errorf("NewServer().WorkIterations() = %d, want iterationsFor(%v) = %d >= 1", got, DefaultCPUWork, want)
	}
	if got := newServer(t, WithCPUWork(0)).WorkIterations(); got != 0 {
		t.Errorf("NewServer(WithCPUWork(0)).WorkIterations() = %d, want 0", got)
	}
	if got := newServer(t, WithCPUWork(time.Second), WithWorkIterations(7)).WorkIterations(); got != 7 {
		t.Errorf("NewServer(WithCPUWork(1s), WithWorkIterations(7)).WorkIterations() = %d, want 7", got)
	}
	if got := srv.StockReadIterations(); got != 0 {
		t.Errorf("NewServer().StockReadIterations() = %d, want 0", got)
	}
	if got, want := newServer(t, WithStockReadWork(100*time.Microsecond)).StockReadIterations(), iterationsFor(100*time.Microsecond); got != want || got < 1 {
		t.Errorf("NewServer(WithStockReadWork(100µs)).StockReadIterations() = %d, want iterationsFor(100µs) = %d >= 1", got, want)
	}
	// Twice the time, twice the iterations (up to rounding).
	one, two := iterationsFor(time.Millisecond), iterationsFor(2*time.Millisecond)
	if two < 2*one-1 || two > 2*one+1 {
		t.Errorf("iterationsFor(1ms), iterationsFor(2ms) = %d, %d, want the second twice the first", one, two)
	}
	srv = newServer(t, WithStock("X", 1), WithStock("Y", 2), WithStock("X", 3))
	if got := strings.Join(srv.SKUs(), ","); got != "X,Y" {
		t.Errorf("SKUs() with X, Y, X = %s, want X,Y", got)
	}
	if got := level(t, srv, "X").Initial; got != 3 {
		t.Errorf("Stock(X).Initial after WithStock(X, 1) then WithStock(X, 3) = %d, want 3", got)
	}
	if _, ok := srv.Stock(DefaultSKUs()[0]); ok {
		t.Errorf("Stock(%q) found with WithStock options given, want the default catalogue unused", DefaultSKUs()[0])
	}
}

func TestNewServerRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		give []Option
		want string // the error's text; "" for no error
	}{
		{name: "empty sku", give: []Option{WithStock("", 1)}, want: "inventory: WithStock: sku must not be empty"},
		{name: "negative stock", give: []Option{WithStock("A", -1)}, want: `inventory: WithStock("A"): units must be >= 0, got -1`},
		{name: "negative work", give: []Option{WithCPUWork(-time.Millisecond)}, want: "inventory: WithCPUWork: duration must be >= 0, got -1ms"},
		{name: "negative read work", give: []Option{WithStockReadWork(-time.Microsecond)}, want: "inventory: WithStockReadWork: duration must be >= 0, got -1µs"},
		{name: "negative iterations", give: []Option{WithWorkIterations(-1)}, want: "inventory: WithWorkIterations: n must be >= 0, got -1"},
		{name: "zero order memory", give: []Option{WithOrderMemory(0)}, want: "inventory: WithOrderMemory: n must be >= 1, got 0"},
		{name: "negative order memory", give: []Option{WithOrderMemory(-5)}, want: "inventory: WithOrderMemory: n must be >= 1, got -5"},
		{name: "negative alloc per call", give: []Option{WithAllocPerCall(-1)}, want: "inventory: WithAllocPerCall: size must be >= 0, got -1"},
		{name: "no database connections", give: []Option{WithDatabase(0, time.Millisecond)}, want: "inventory: WithDatabase: conns must be >= 1, got 0"},
		{name: "negative database latency", give: []Option{WithDatabase(4, -time.Millisecond)}, want: "inventory: WithDatabase: latency must be >= 0, got -1ms"},
		{name: "both database values bad", give: []Option{WithDatabase(-1, -time.Second)},
			want: "inventory: WithDatabase: conns must be >= 1, got -1\ninventory: WithDatabase: latency must be >= 0, got -1s"},
		{
			name: "every bad value at once",
			give: []Option{WithDatabase(0, 0), WithOrderMemory(0), WithStock("B", 2), WithStock("A", -3), WithCPUWork(-time.Second), WithStock("", 0)},
			want: "inventory: WithStock(\"A\"): units must be >= 0, got -3\n" +
				"inventory: WithStock: sku must not be empty\n" +
				"inventory: WithCPUWork: duration must be >= 0, got -1s\n" +
				"inventory: WithOrderMemory: n must be >= 1, got 0\n" +
				"inventory: WithDatabase: conns must be >= 1, got 0",
		},
		{name: "the last value given counts", give: []Option{WithOrderMemory(0), WithOrderMemory(3), WithStock("A", -1), WithStock("A", 1)}},
		{name: "a bad WithCPUWork is reported beside WithWorkIterations", give: []Option{WithWorkIterations(1), WithCPUWork(-time.Millisecond)},
			want: "inventory: WithCPUWork: duration must be >= 0, got -1ms"},
		{name: "zero values that are allowed", give: []Option{WithStock("A", 0), WithCPUWork(0), WithWorkIterations(0), WithOrderMemory(1), WithDatabase(1, 0), WithStockReadWork(0)}},
		{name: "a bad database replaced by a good one", give: []Option{WithDatabase(0, -1), WithDatabase(2, time.Millisecond)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := NewServer(tt.give...)
			if tt.want == "" {
				if err != nil || srv == nil {
					t.Fatalf("NewServer(%s) = %v, %v; want a server, nil", tt.name, srv, err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("NewServer(%s) error = %v, want %q", tt.name, err, tt.want)
			}
			if srv != nil {
				t.Errorf("NewServer(%s) = %v, want a nil server with the error", tt.name, srv)
			}
		})
	}
}

func TestBurn(t *testing.T) {
	if a, b := Burn(100, 1), Burn(100, 1); a != b {
		t.Errorf("Burn(100, 1) not deterministic: %x, %x", a, b)
	}
	if a, b := Burn(100, 1), Burn(101, 1); a == b {
		t.Errorf("Burn(100, 1) == Burn(101, 1) = %x, want the extra round to change it", a)
	}
	if a, b := Burn(100, 1), Burn(100, 2); a == b {
		t.Errorf("Burn(100, 1) == Burn(100, 2) = %x, want the seed to change it", a)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = Burn(10, 1) }); allocs != 0 {
		t.Errorf("Burn allocates %v times per run, want 0", allocs)
	}
	if got := iterationsFor(0); got != 0 {
		t.Errorf("iterationsFor(0) = %d, want 0", got)
	}
	if got := iterationsFor(time.Nanosecond); got != 1 {
		t.Errorf("iterationsFor(1ns) = %d, want 1 (never less than one round)", got)
	}
}

// TestBurnConcurrent: calls of Burn at once, each on a hash state another
// call left, give what one call alone gives (a state not reset, or shared
// by two calls, would not).
func TestBurnConcurrent(t *testing.T) {
	want := Burn(50, 7)
	got := make(chan [32]byte, 8*20)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				got <- Burn(50, 7)
			}
		})
	}
	wg.Wait()
	close(got)
	for g := range got {
		if g != want {
			t.Fatalf("Burn(50, 7) from 8 goroutines at once = %x, want %x as alone", g, want)
		}
	}
}

func BenchmarkBurnRound(b *testing.B) {
	b.ReportAllocs()
	var sink byte
	for i := 0; i < b.N; i++ {
		sum := Burn(1, uint64(i))
		sink ^= sum[0]
	}
	_ = sink
}

func BenchmarkAllocateNoWork(b *testing.B) {
	srv := newServer(b, WithStock("A", int64(b.N)+1), WithWorkIterations(0), WithOrderMemory(1<<16))
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("o%d", i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := srv.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: ids[i]}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocateDefaultWork measures one Allocate with the calibrated
// default CPU work; on an idle core ns/op should be close to DefaultCPUWork.
func BenchmarkAllocateDefaultWork(b *testing.B) {
	srv := newServer(b, WithStock("A", int64(b.N)+1))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := srv.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "A", Quantity: 1, OrderId: strconv.Itoa(i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(srv.WorkIterations()), "iterations/op")
}

// TestAllocPerCallHeld: with WithAllocPerCall an Allocate holds its
// payload while it waits for the database: the runtime's heap in use
// grows by it while the call waits.
func TestAllocPerCallHeld(t *testing.T) {
	const size = 32 << 20
	srv := newServer(t, WithWorkIterations(0), WithAllocPerCall(size), WithDatabase(1, 0))
	hold := make(chan struct{})
	waiting := make(chan struct{})
	srv.afterWork = func(context.Context) {
		close(waiting)
		<-hold
	}
	done := make(chan error, 1)
	go func() {
		_, err := srv.Allocate(context.Background(), &inventoryv1.AllocateRequest{Sku: "SKU-0001", Quantity: 1, OrderId: "o1"})
		done <- err
	}()
	<-waiting
	inUse := func() uint64 {
		runtime.GC()
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	during := inUse()
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	after := inUse()
	if during < after+size*3/4 {
		t.Errorf("live heap %d MiB while the call runs, %d MiB after: want it to hold about %d MiB more", during>>20, after>>20, size>>20)
	}
}
