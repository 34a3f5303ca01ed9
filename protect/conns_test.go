package protect_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/connlimit"
	"github.com/levee-go/levee/goaway"
	"github.com/levee-go/levee/protect"
)

// dialEmpty returns a client on a connection of its own to addr, closed
// when the test ends, and the connection.
func dialEmpty(t *testing.T, addr string) (testgrpc.TestServiceClient, *grpc.ClientConn) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc), cc
}

// newCapped returns the preset with opts and a loopback listener wrapped by
// it, both stopped when the test ends.
func newCapped(t *testing.T, opts ...protect.Option) (*protect.Server, *connlimit.Listener) {
	t.Helper()
	p, err := protect.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := p.Listener(inner)
	t.Cleanup(func() { lis.Close() })
	return p, lis
}

// emptyCallErr makes one EmptyCall that fails fast (no wait for a ready
// connection), within 5 s.
func emptyCallErr(c testgrpc.TestServiceClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.EmptyCall(ctx, &testgrpc.Empty{})
	return err
}

// TestListenerCapsConnections: through real grpc-go clients, with
// WithConnLimits(2, 0) the third client's connection is reset and its call
// fails UNAVAILABLE, while the two clients connected keep being served;
// once one leaves, a new client is served.
func TestListenerCapsConnections(t *testing.T) {
	p, lis := newCapped(t, protect.WithoutCPU(), protect.WithoutMemory(), protect.WithConnLimits(2, 0))
	gs := grpc.NewServer(p.ServerOptions()...)
	testgrpc.RegisterTestServiceServer(gs, &service{})
	go gs.Serve(lis)
	defer gs.Stop()
	addr := lis.Addr().String()

	first, firstConn := dialEmpty(t, addr)
	second, _ := dialEmpty(t, addr)
	for _, c := range []testgrpc.TestServiceClient{first, second} {
		if err := emptyCallErr(c); err != nil {
			t.Fatalf("call on one of the first two connections: %v", err)
		}
	}
	third, _ := dialEmpty(t, addr)
	if err := emptyCallErr(third); status.Code(err) != codes.Unavailable {
		t.Fatalf("call on the third connection = %v, want UNAVAILABLE (connection reset)", err)
	}
	for i := range 20 {
		for _, c := range []testgrpc.TestServiceClient{first, second} {
			if err := emptyCallErr(c); err != nil {
				t.Fatalf("call %d on a connection under the cap: %v", i, err)
			}
		}
	}
	if st := lis.Stats(); st.Open != 2 || st.RefusedCap == 0 || st.MaxConns != 2 {
		t.Fatalf("listener Stats = %+v, want 2 open, some refused beyond a cap of 2", st)
	}
	firstConn.Close()
	for deadline := time.Now().Add(10 * time.Second); lis.Open() > 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Open() = %d 10 s after a client left, want 1", lis.Open())
		}
	}
	fourth, _ := dialEmpty(t, addr)
	if err := emptyCallErr(fourth); err != nil {
		t.Fatalf("call of a new client after one left: %v", err)
	}
}

func TestListenerDefaultCap(t *testing.T) {
	_, lis := newCapped(t, protect.WithoutCPU(), protect.WithoutMemory())
	if got, want := lis.MaxConns(), protect.DefaultMaxConns(); got != want {
		t.Fatalf("MaxConns() = %d, want DefaultMaxConns() = %d", got, want)
	}
	if st := lis.Stats(); st.MaxConnsPerPeer != 0 {
		t.Fatalf("Stats() = %+v, want no cap per client by default", st)
	}
}

func TestWithConnLimitsRejectsNegative(t *testing.T) {
	_, err := protect.New(protect.WithConnLimits(-1, -2))
	if err == nil || !strings.Contains(err.Error(), "protect: WithConnLimits: want caps >= 0, got max -1, perPeer -2") {
		t.Fatalf("New(WithConnLimits(-1, -2)) = %v, want an error naming it", err)
	}
}

// saturated is a CPU signal that always reads saturated: evidence of
// overload for the run limit. It measures no utilisation (0), so the run
// limit follows Saturated alone.
type saturated struct{}

func (saturated) Utilization() float64 { return 0 }
func (saturated) Saturated() bool      { return true }

// TestGoAwayUnderSustainedOverload: with the preset's evidence of overload
// forced on (a CPU that always reads saturated), Server.GoAway sends
// GOAWAY to the client's connection; the client reconnects by itself and
// none of its calls fails.
func TestGoAwayUnderSustainedOverload(t *testing.T) {
	p, err := protect.New(protect.WithCPU(saturated{}), protect.WithoutMemory())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if !p.RunLimit().Overloaded(time.Now()) {
		t.Fatal("RunLimit().Overloaded = false with a saturated CPU, want true")
	}
	var built atomic.Int32
	gs, err := p.GoAway(func() *grpc.Server {
		built.Add(1)
		s := grpc.NewServer(p.ServerOptions()...)
		testgrpc.RegisterTestServiceServer(s, &service{})
		return s
	}, goaway.WithShards(2), goaway.WithSustain(0), goaway.WithEvery(30*time.Millisecond), goaway.WithCheck(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := p.Listener(inner)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	client, _ := dialEmpty(t, lis.Addr().String())
	deadline := time.Now().Add(20 * time.Second)
	calls := 0
	for gs.Stats().Conns < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("after %d calls in 20 s: goaway Stats = %+v, want the client to have reconnected twice", calls, gs.Stats())
		}
		if err := emptyCallErr(client); err != nil {
			t.Fatalf("call %d: %v, want every call served across GOAWAYs", calls, err)
		}
		calls++
	}
	if st := gs.Stats(); st.Drains < 2 || built.Load() < 4 {
		t.Fatalf("goaway Stats = %+v after %d builds, want >= 2 rounds on 2 shards", st, built.Load())
	}
	gs.GracefulStop()
	if err := <-done; err != nil {
		t.Fatalf("Serve = %v, want nil after GracefulStop", err)
	}
}

// TestGoAwayNotWithoutOverload: an idle server has no evidence of
// overload, so GoAway's server drains nothing.
func TestGoAwayNotWithoutOverload(t *testing.T) {
	p, err := protect.New(protect.WithCPU(fakeCPU{}), protect.WithoutMemory())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	gs, err := p.GoAway(func() *grpc.Server {
		s := grpc.NewServer(p.ServerOptions()...)
		testgrpc.RegisterTestServiceServer(s, &service{})
		return s
	}, goaway.WithSustain(0), goaway.WithEvery(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Stop()
	now := time.Now()
	for i := range 100 {
		gs.Tick(now.Add(time.Duration(i) * time.Second))
	}
	if st := gs.Stats(); st.Drains != 0 || !st.OverloadSince.IsZero() {
		t.Fatalf("goaway Stats = %+v after 100 s of checks on an idle server, want no round", st)
	}
}
