package goaway

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/cpu"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// flag is an Overload set by the test.
type flag struct{ atomic.Bool }

func (f *flag) Saturated() bool { return f.Load() }

// connCounter counts the connections the servers saw begin and end.
type connCounter struct{ begin, end atomic.Int64 }

func (c *connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (c *connCounter) HandleRPC(context.Context, stats.RPCStats)                       {}
func (c *connCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (c *connCounter) HandleConn(_ context.Context, s stats.ConnStats) {
	switch s.(type) {
	case *stats.ConnBegin:
		c.begin.Add(1)
	case *stats.ConnEnd:
		c.end.Add(1)
	}
}

// fixture is a Server on loopback whose shards share one health service;
// each call waits 5 ms in an interceptor, so calls are in flight when a
// GOAWAY goes out.
type fixture struct {
	s      *Server
	conns  *connCounter
	health *health.Server
	calls  atomic.Int64 // calls that reached the interceptor
	served chan error
	addr   string
}

func newFixture(t *testing.T, overload Overload, opts ...Option) *fixture {
	t.Helper()
	f := &fixture{conns: &connCounter{}, health: health.NewServer(), served: make(chan error, 1)}
	slow := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		f.calls.Add(1)
		time.Sleep(5 * time.Millisecond)
		return h(ctx, req)
	}
	build := func() *grpc.Server {
		srv := grpc.NewServer(grpc.UnaryInterceptor(slow), grpc.StatsHandler(f.conns))
		healthpb.RegisterHealthServer(srv, f.health)
		return srv
	}
	s, err := NewServer(build, overload, opts...)
	if err != nil {
		t.Fatal(err)
	}
	s.manual = true
	s.rand = func() float64 { return 0.5 }
	f.s = s
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = lis.Addr().String()
	go func() { f.served <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-f.served; err != nil {
			t.Errorf("Serve() = %v after Stop, want nil", err)
		}
	})
	return f
}

func (f *fixture) client(t *testing.T) (*grpc.ClientConn, healthpb.HealthClient) {
	t.Helper()
	cc, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("first call: %v", err)
	}
	return cc, hc
}

// waitFor polls cond for up to 10 s; the work it waits for is grpc-go's
// (a GracefulStop finishing), not a timer of this package.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestGoAwayRealClients: eight grpc-go clients, one connection each
// (one per shard), call without pause and without WaitForReady. Three
// GOAWAY rounds under sustained overload each close exactly one
// connection gracefully; its client reconnects, and not one call fails.
func TestGoAwayRealClients(t *testing.T) {
	var over flag
	f := newFixture(t, &over, WithShards(8), WithSustain(10*time.Second), WithEvery(10*time.Second))
	const clients = 8
	var (
		calls, failed atomic.Int64
		firstErr      atomic.Value
		wg            sync.WaitGroup
		stop          = make(chan struct{})
	)
	for range clients {
		_, hc := f.client(t)
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
					cancel()
					calls.Add(1)
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				}
			}()
		}
	}
	if got := f.conns.begin.Load(); got != clients {
		t.Fatalf("%d connections before the rounds, want %d", got, clients)
	}

	f.s.Tick(t0) // not overloaded
	over.Store(true)
	now := t0.Add(time.Second)
	f.s.Tick(now) // overload starts; first round due 10 s + 0.5 × 10 s later
	const rounds = 3
	for r := 1; r <= rounds; r++ {
		before := calls.Load()
		now = now.Add(15 * time.Second)
		f.s.Tick(now) // round r: the oldest shard leaves the rotation
		if st := f.s.Stats(); st.Drains != uint64(r) || st.Draining != 1 {
			t.Fatalf("round %d: Stats() = %+v, want Drains %d, Draining 1", r, st, r)
		}
		now = now.Add(time.Second)
		f.s.Tick(now) // its GOAWAY
		waitFor(t, "the drained shard to finish", func() bool { return f.s.Stats().Draining == 0 })
		waitFor(t, "the client to reconnect", func() bool { return f.conns.begin.Load() == int64(clients+r) })
		waitFor(t, "calls on the new connection", func() bool { return calls.Load() > before+100 })
		if got := f.conns.end.Load(); got != int64(r) {
			t.Errorf("round %d: %d connections ended, want %d (one shard of one connection each)", r, got, r)
		}
	}
	close(stop)
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d calls failed across %d GOAWAY rounds; first: %v", n, calls.Load(), rounds, firstErr.Load())
	}
	st := f.s.Stats()
	if st.Drains != rounds || st.Conns != clients+rounds || st.Skipped != 0 || st.GraceExpired != 0 {
		t.Errorf("Stats() = %+v, want Drains %d, Conns %d", st, rounds, clients+rounds)
	}
	t.Logf("%d calls, %d failed; %+v", calls.Load(), failed.Load(), st)
}

// TestTickSteps drives the decision with injected time: sustain, the
// jittered first round, the jittered interval, and the reset when the
// overload ends. Drained shards never served get their GracefulStop at
// the next Tick and finish at once.
func TestTickSteps(t *testing.T) {
	var over flag
	s, err := NewServer(func() *grpc.Server { return grpc.NewServer() }, &over, WithShards(3), WithSustain(10*time.Second), WithEvery(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	s.manual = true
	draws := []float64{0.5, 0.9, 0.1, 0.0, 0.5}
	s.rand = func() float64 { v := draws[0]; draws = draws[1:]; return v }
	steps := []struct {
		at         time.Duration
		overloaded bool
		want       uint64 // Drains
	}{
		{0, false, 0},
		{time.Second, true, 0},       // since t0+1s; first round due at +10 s + 0.5 × 10 s = t0+16s
		{15 * time.Second, true, 0},  // not yet
		{16 * time.Second, true, 1},  // round 1; next due (0.5 + 0.9) × 10 s later: t0+30s
		{29 * time.Second, true, 1},  //
		{30 * time.Second, true, 2},  // round 2; next due at t0+36s
		{33 * time.Second, false, 2}, // the overload ends: everything resets
		{34 * time.Second, true, 2},  // since t0+34s; due +10 s + 0 = t0+44s
		{43 * time.Second, true, 2},
		{44 * time.Second, true, 3},
	}
	for _, st := range steps {
		over.Store(st.overloaded)
		s.Tick(t0.Add(st.at))
		if got := s.Stats().Drains; got != st.want {
			t.Fatalf("Tick(t0+%v) overloaded %v: Stats().Drains = %d, want %d", st.at, st.overloaded, got, st.want)
		}
	}
	if got := s.Stats().OverloadSince; !got.Equal(t0.Add(34 * time.Second)) {
		t.Errorf("Stats().OverloadSince = %v, want t0+34s", got)
	}
	s.Tick(t0.Add(45 * time.Second))
	waitFor(t, "drained shards to finish", func() bool { return s.Stats().Draining == 0 })
	over.Store(false)
	s.Tick(t0.Add(46 * time.Second))
	if got := s.Stats().OverloadSince; !got.IsZero() {
		t.Errorf("after the overload: Stats().OverloadSince = %v, want zero", got)
	}
}

// drainedWithStream returns a fixture of two shards and a grace of 30 s
// whose oldest shard holds the one connection, with a watch stream open
// on it, and was taken out of the rotation by a round at t0+1s; its
// GOAWAY is not sent yet, and no further round comes.
func drainedWithStream(t *testing.T) (*fixture, healthpb.Health_WatchClient) {
	t.Helper()
	var over flag
	over.Store(true)
	f := newFixture(t, &over, WithShards(2), WithSustain(0), WithEvery(time.Second), WithGrace(30*time.Second))
	_, hc := f.client(t) // the first connection: shard 0, the oldest
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	f.s.Tick(t0)                  // since t0; due at t0 + 0.5 s
	f.s.Tick(t0.Add(time.Second)) // round 1: shard 0 leaves the rotation
	over.Store(false)             // no further round
	return f, w
}

// TestGraceAndSkip: a watch stream keeps its drained shard draining until
// the grace ends; then it is cut with UNAVAILABLE. Without a grace, no
// more than WithShards shards drain at once: further rounds are skipped.
func TestGraceAndSkip(t *testing.T) {
	t.Run("grace", func(t *testing.T) {
		f, w := drainedWithStream(t)
		f.s.Tick(t0.Add(2 * time.Second)) // GOAWAY; grace ends at t0+32s
		f.s.Tick(t0.Add(31 * time.Second))
		if st := f.s.Stats(); st.Draining != 1 || st.GraceExpired != 0 {
			t.Fatalf("before the grace ends: Stats() = %+v, want Draining 1, GraceExpired 0", st)
		}
		f.s.Tick(t0.Add(32 * time.Second))
		if _, err := w.Recv(); status.Code(err) != codes.Unavailable {
			t.Errorf("watch stream after the grace: Recv() = %v, want code Unavailable", err)
		}
		waitFor(t, "the drained shard to stop", func() bool { return f.s.Stats().Draining == 0 })
		if st := f.s.Stats(); st.GraceExpired != 1 || st.Drains != 1 {
			t.Errorf("Stats() = %+v, want GraceExpired 1, Drains 1", st)
		}
	})
	t.Run("skip", func(t *testing.T) {
		var over flag
		over.Store(true)
		f := newFixture(t, &over, WithShards(2), WithSustain(0), WithEvery(time.Second))
		ctx, cancel := context.WithCancel(context.Background())
		var streams []healthpb.Health_WatchClient
		for range 2 { // one connection, one endless stream, per shard
			_, hc := f.client(t)
			w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Recv(); err != nil {
				t.Fatal(err)
			}
			streams = append(streams, w)
		}
		now := t0
		for range 8 {
			f.s.Tick(now)
			now = now.Add(2 * time.Second)
		}
		st := f.s.Stats()
		if st.Drains != 2 || st.Draining != 2 || st.Skipped == 0 {
			t.Errorf("Stats() = %+v, want Drains 2, Draining 2, Skipped > 0", st)
		}
		cancel() // the streams end; the drained shards finish
		for _, w := range streams {
			w.Recv()
		}
		waitFor(t, "the drained shards to finish", func() bool { return f.s.Stats().Draining == 0 })
	})
}

// TestGracefulStop: the Server's GracefulStop lets a call in flight
// finish.
func TestGracefulStop(t *testing.T) {
	var over flag
	f := newFixture(t, &over)
	_, hc := f.client(t)
	done := make(chan error, 1)
	go func() {
		_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
		done <- err
	}()
	waitFor(t, "the call to start", func() bool { return f.calls.Load() == 2 })
	f.s.GracefulStop()
	if err := <-done; err != nil {
		t.Errorf("call in flight during GracefulStop: %v", err)
	}
	f.s.Tick(t0) // after a stop: nothing
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.s.Serve(lis); !errors.Is(err, ErrServerStopped) {
		t.Errorf("Serve() after GracefulStop = %v, want ErrServerStopped", err)
	}
}

// TestGracefulStopKeepsGrace: a shard drained by a round keeps its
// WithGrace bound through the Server's GracefulStop. A watch stream on it
// is cut when the grace ends, and GracefulStop returns then instead of
// waiting for the stream for ever: Ticks during the stop still end
// graces. A drained shard whose GOAWAY no Tick had sent yet gets it from
// GracefulStop, and its grace from the next Tick.
func TestGracefulStopKeepsGrace(t *testing.T) {
	for _, tt := range []struct {
		name        string
		goawayFirst bool // the round's GOAWAY goes out before GracefulStop
	}{{"after its GOAWAY", true}, {"before its GOAWAY", false}} {
		t.Run(tt.name, func(t *testing.T) {
			f, w := drainedWithStream(t)
			if tt.goawayFirst {
				f.s.Tick(t0.Add(2 * time.Second)) // its GOAWAY; grace ends at t0+32s
			}
			stopped := make(chan struct{})
			go func() { f.s.GracefulStop(); close(stopped) }()
			waitFor(t, "GracefulStop to begin", f.s.isStopped)
			if !tt.goawayFirst {
				f.s.Tick(t0.Add(2 * time.Second)) // GracefulStop sent the GOAWAY; grace ends at t0+32s
			}
			f.s.Tick(t0.Add(31 * time.Second))
			select {
			case <-stopped:
				t.Fatal("GracefulStop returned before the grace of a shard with a stream ended")
			case <-time.After(20 * time.Millisecond):
			}
			f.s.Tick(t0.Add(32 * time.Second))
			select {
			case <-stopped:
			case <-time.After(10 * time.Second):
				f.s.Stop() // let the test end
				<-stopped
				t.Fatal("GracefulStop still waited 10 s after the drained shard's grace ended")
			}
			if _, err := w.Recv(); status.Code(err) != codes.Unavailable {
				t.Errorf("watch stream after the grace: Recv() = %v, want code Unavailable", err)
			}
			if st := f.s.Stats(); st.GraceExpired != 1 || st.Draining != 0 {
				t.Errorf("Stats() after GracefulStop = %+v, want GraceExpired 1, Draining 0", st)
			}
		})
	}
}

func TestNewServerErrors(t *testing.T) {
	var over flag
	tests := []struct {
		name string
		give []Option
		want []string
	}{
		{"one shard", []Option{WithShards(1)}, []string{"goaway: WithShards: n must be >= 2, got 1"}},
		{"negative sustain", []Option{WithSustain(-1)}, []string{"goaway: WithSustain: d must be >= 0, got -1ns"}},
		{"every 0", []Option{WithEvery(0)}, []string{"goaway: WithEvery: d must be > 0, got 0s"}},
		{"check 0", []Option{WithCheck(0)}, []string{"goaway: WithCheck: d must be > 0, got 0s"}},
		{"negative grace", []Option{WithGrace(-time.Second)}, []string{"goaway: WithGrace: d must be >= 0, got -1s"}},
		{"all", []Option{WithShards(0), WithSustain(-1), WithEvery(-1), WithCheck(-1), WithGrace(-1)}, []string{
			"WithShards", "WithSustain", "WithEvery", "WithCheck", "WithGrace",
		}},
	}
	for _, tt := range tests {
		built := 0
		build := func() *grpc.Server { built++; return grpc.NewServer() }
		s, err := NewServer(build, &over, tt.give...)
		if s != nil || err == nil {
			t.Fatalf("%s: NewServer(...) = %v, %v; want nil and an error", tt.name, s, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: NewServer(...) error = %q, want it to contain %q", tt.name, err, w)
			}
		}
		if built != 0 {
			t.Errorf("%s: NewServer with bad options built %d servers, want 0", tt.name, built)
		}
	}
	n := 0
	s, err := NewServer(func() *grpc.Server {
		if n++; n == 3 {
			return nil
		}
		return grpc.NewServer()
	}, &over)
	if s != nil || err == nil || !strings.Contains(err.Error(), "goaway: build returned a nil *grpc.Server") {
		t.Errorf("NewServer(build returning nil) = %v, %v; want an error saying so", s, err)
	}
}

func TestNewServerPanics(t *testing.T) {
	defer func() {
		if got, want := recover(), "goaway: NewServer with nil build or overload"; got != want {
			t.Errorf("NewServer(nil, nil): panic = %v, want %q", got, want)
		}
	}()
	NewServer(nil, nil)
}

// TestNewServerPanicsOnANilMonitor: an overload signal holding a nil
// pointer (a nil *cpu.Monitor, what protect.Server.CPU returns when no
// CPU source can be read) is a nil overload: NewServer panics at once, as
// documented. Before, it passed, and the ticker goroutine panicked at
// the first check, a second after Serve, where no caller could recover.
func TestNewServerPanicsOnANilMonitor(t *testing.T) {
	var mon *cpu.Monitor
	defer func() {
		if got, want := recover(), "goaway: NewServer with nil build or overload"; got != want {
			t.Errorf("NewServer(build, nil *cpu.Monitor): panic = %v, want %q", got, want)
		}
	}()
	s, err := NewServer(func() *grpc.Server { return grpc.NewServer() }, mon, WithShards(2))
	if err == nil {
		defer s.Stop()
	}
}

// TestTicker runs the Server's own ticker (a 1 ms check) under a
// constant overload: rounds happen, clients keep working, and Stop
// leaves no goroutine behind (goleak in TestMain).
func TestTicker(t *testing.T) {
	var over flag
	over.Store(true)
	build := func() *grpc.Server {
		srv := grpc.NewServer()
		healthpb.RegisterHealthServer(srv, health.NewServer())
		return srv
	}
	s, err := NewServer(build, &over, WithShards(2), WithSustain(0), WithEvery(5*time.Millisecond), WithCheck(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	for i := 0; i < 50 || s.Stats().Drains < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if i > 100000 {
			t.Fatal("no three rounds in 100000 calls")
		}
	}
	s.Stop()
	if err := <-served; err != nil {
		t.Errorf("Serve() after Stop = %v, want nil", err)
	}
	if err := s.Serve(lis); !errors.Is(err, ErrServerStopped) {
		t.Errorf("second Serve() = %v, want ErrServerStopped", err)
	}
}

// TestHugeDurations: a sustain or an interval too long to ever pass (up
// to math.MaxInt64) means no round, or no second round: the sums and
// products of the schedule saturate instead of wrapping into the past.
func TestHugeDurations(t *testing.T) {
	tests := []struct {
		name  string
		opts  []Option
		draws []float64
		want  uint64 // Drains after a day of overload
	}{
		{"sustain", []Option{WithSustain(math.MaxInt64), WithEvery(10 * time.Second)}, []float64{0.5}, 0},
		{"every", []Option{WithSustain(0), WithEvery(math.MaxInt64)}, []float64{0, 0.9}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var over flag
			over.Store(true)
			s, err := NewServer(func() *grpc.Server { return grpc.NewServer() }, &over, append([]Option{WithShards(2)}, tt.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop()
			s.manual = true
			draws := tt.draws
			s.rand = func() float64 { // the draws, then the last one again
				v := draws[0]
				if len(draws) > 1 {
					draws = draws[1:]
				}
				return v
			}
			for _, at := range []time.Duration{0, time.Second, time.Hour, 24 * time.Hour} {
				s.Tick(t0.Add(at))
			}
			if got := s.Stats().Drains; got != tt.want {
				t.Errorf("Stats().Drains after a day of overload = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestBuildSameServer: a build that returns a server it returned before
// (one grpc.Server for every shard) is an error, not a Server whose first
// round GracefulStops every shard at once and leaves Serve spinning over
// closed shards, serving nothing.
func TestBuildSameServer(t *testing.T) {
	var over flag
	srv := grpc.NewServer()
	defer srv.Stop()
	s, err := NewServer(func() *grpc.Server { return srv }, &over, WithShards(2))
	if s != nil || err == nil || !strings.Contains(err.Error(), "goaway: build returned a *grpc.Server already in use") {
		t.Fatalf("NewServer(build returning one server) = %v, %v; want an error saying so", s, err)
	}

	var built []*grpc.Server
	s, err = NewServer(func() *grpc.Server {
		if len(built) == 2 { // the round's replacement: a shard's server again
			return built[0]
		}
		built = append(built, grpc.NewServer())
		return built[len(built)-1]
	}, &over, WithShards(2), WithSustain(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	s.manual = true
	s.rand = func() float64 { return 0 }
	over.Store(true)
	s.Tick(t0) // a round is due at once; its replacement is refused
	if st := s.Stats(); st.BuildErrors != 1 || st.Drains != 0 {
		t.Errorf("Stats() after a round whose build returned a shard's server = %+v, want BuildErrors 1, Drains 0", st)
	}
}
