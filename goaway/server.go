package goaway

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/internal/nilness"
)

// Defaults of [Server].
const (
	DefaultShards  = 8
	DefaultSustain = 10 * time.Second
	DefaultEvery   = 10 * time.Second
	DefaultCheck   = time.Second
)

// ErrServerStopped is returned by Serve after Stop or GracefulStop, and
// by a second Serve.
var ErrServerStopped = errors.New("goaway: server stopped or already serving")

// Overload is the signal a [Server] drains on: a cpu.Monitor, a
// memory.Monitor, or any type whose Saturated reports sustained
// overload. Saturated is called from one goroutine every check interval.
type Overload interface {
	Saturated() bool
}

// Option configures a [Server]. An option only records its value;
// [NewServer] validates them all and reports every bad one. A nil Option
// is ignored.
type Option func(*options)

type options struct {
	shards  int
	sustain time.Duration
	every   time.Duration
	check   time.Duration
	grace   time.Duration
}

// WithShards sets the number of grpc.Servers the connections are spread
// over, round robin; one GOAWAY round drains one of them, about 1/n of
// the connections. Default [DefaultShards] (8). n must be >= 2.
func WithShards(n int) Option { return func(o *options) { o.shards = n } }

// WithSustain sets how long the overload signal must have been true, at
// every check, before the first GOAWAY round. Default [DefaultSustain]
// (10 s). d must be >= 0.
func WithSustain(d time.Duration) Option { return func(o *options) { o.sustain = d } }

// WithEvery sets the mean time between GOAWAY rounds while the overload
// lasts. Each wait is drawn uniformly from [d/2, 3d/2], and the first
// round comes a uniform [0, d) after the sustain period, so replicas
// overloaded by the same spike do not send their clients away at the
// same instant. Default [DefaultEvery] (10 s). d must be > 0.
func WithEvery(d time.Duration) Option { return func(o *options) { o.every = d } }

// WithCheck sets how often the signal is read; a drained shard's GOAWAY
// is sent one check after it leaves the rotation, and a grace is
// enforced to within a check. Default [DefaultCheck] (1 s). d must be
// > 0.
func WithCheck(d time.Duration) Option { return func(o *options) { o.check = d } }

// WithGrace bounds how long a drained shard may keep serving the calls
// it had: d after its GOAWAY, its remaining connections are closed and
// their calls fail (grpc.Server.Stop), as keepalive's
// MaxConnectionAgeGrace does.
// The bound holds through the Server's GracefulStop: a shard drained
// before it is still stopped d after its GOAWAY (sent by GracefulStop
// when no check had sent it yet; the grace then starts at the next
// check). It does not bound the shards in the rotation, whose calls
// GracefulStop waits for as grpc.Server.GracefulStop does.
// Default 0: no bound, calls finish however long they take; at most
// as many shards as WithShards may be draining at once, and no round
// starts beyond that. d must be >= 0.
func WithGrace(d time.Duration) Option { return func(o *options) { o.grace = d } }

func (o *options) validate() error {
	var errs []error
	if o.shards < 2 {
		errs = append(errs, fmt.Errorf("goaway: WithShards: n must be >= 2, got %d", o.shards))
	}
	if o.sustain < 0 {
		errs = append(errs, fmt.Errorf("goaway: WithSustain: d must be >= 0, got %v", o.sustain))
	}
	if o.every <= 0 {
		errs = append(errs, fmt.Errorf("goaway: WithEvery: d must be > 0, got %v", o.every))
	}
	if o.check <= 0 {
		errs = append(errs, fmt.Errorf("goaway: WithCheck: d must be > 0, got %v", o.check))
	}
	if o.grace < 0 {
		errs = append(errs, fmt.Errorf("goaway: WithGrace: d must be >= 0, got %v", o.grace))
	}
	return errors.Join(errs...)
}

// Server serves gRPC on one listener through several grpc.Servers
// (shards) and, while an [Overload] signal stays true, gracefully closes
// the connections of one shard at a time: grpc.Server.GracefulStop sends
// each of them an HTTP/2 GOAWAY (grpc-go's two-step graceful one: a
// first GOAWAY and a ping, then the last stream id), lets the calls in
// flight finish, and a fresh shard built in its place takes new
// connections. It is the Envoy overload manager's "disable keepalive"
// action for grpc-go, which has no public way to drain one connection.
//
// What clients see: a grpc-go client keeps its calls in flight on the
// old connection, moves new ones to a new connection (calls that raced
// the GOAWAY are retried transparently, as the server never saw them),
// and reconnects through its resolver and balancer; behind an L4 load
// balancer the new connection may land on another replica, which is the
// point. No admitted call fails, unless [WithGrace] cuts calls that
// outlast it (long-lived streams end with UNAVAILABLE, and their clients
// reopen them).
//
// build is called once per shard by NewServer and once per GOAWAY round
// for the replacement; it must return a new grpc.Server each time,
// register the same services on each, with the same options, and share
// state the services keep (one health.Server for all, say): a client may
// land on any shard. Options and interceptors built once and passed to
// every grpc.NewServer keep their limits server-wide.
//
// Create a Server with [NewServer]; the zero value is not usable. It is
// safe for concurrent use. By default it has [DefaultShards] shards,
// starts draining after [DefaultSustain] of overload, one shard every
// [DefaultEvery] (jittered), checking every [DefaultCheck], with no
// grace bound.
type Server struct {
	build    func() *grpc.Server
	overload Overload
	opts     options
	rand     func() float64 // in [0, 1); tests replace it
	manual   bool           // tests: no ticker goroutine, Tick is driven by hand

	mu       sync.Mutex
	shards   []*shard
	draining map[*shard]*drain
	gen      uint64
	rr       int
	lis      net.Listener
	serving  bool
	stopped  bool      // Stop or GracefulStop began
	halted   bool      // and every shard is stopped: Tick does nothing
	since    time.Time // start of the current overload; zero when none
	due      time.Time // next GOAWAY round
	stats    Stats

	wg   sync.WaitGroup // shard Serve goroutines, drains, the ticker
	stop chan struct{}  // closed when a stop begins
	halt chan struct{}  // closed when every shard is stopped; ends the ticker
}

// drain is the state of a drained shard.
type drain struct {
	at       time.Time // when it was taken out of the rotation
	goaway   bool      // GracefulStop called
	graceEnd time.Time // when it is stopped; zero: not bounded (or done)
	// GracefulStop sent its GOAWAY; its grace starts at the next Tick.
	graceNext bool
}

// shard is one grpc.Server and the listener that feeds it.
type shard struct {
	srv *grpc.Server
	lis *chanListener
	gen uint64
}

// NewServer builds the shards and returns a Server that will serve them
// on the listener given to Serve. It returns an error naming every bad
// option value, or if build returns nil or a server it returned before
// for another shard. It panics if build or overload is nil, overload
// holding a nil pointer included (a nil *cpu.Monitor): those are
// programming errors, not values, and a nil signal would panic later, on
// the goroutine that reads it.
func NewServer(build func() *grpc.Server, overload Overload, opts ...Option) (*Server, error) {
	if build == nil || nilness.Is(overload) {
		panic("goaway: NewServer with nil build or overload")
	}
	s := &Server{
		build:    build,
		overload: overload,
		opts:     options{shards: DefaultShards, sustain: DefaultSustain, every: DefaultEvery, check: DefaultCheck},
		rand:     rand.Float64,
		draining: map[*shard]*drain{},
		stop:     make(chan struct{}),
		halt:     make(chan struct{}),
	}
	for _, o := range opts {
		if o != nil {
			o(&s.opts)
		}
	}
	if err := s.opts.validate(); err != nil {
		return nil, err
	}
	for range s.opts.shards {
		sh, err := s.newShard()
		if err != nil {
			for _, b := range s.shards {
				b.srv.Stop()
			}
			return nil, err
		}
		s.shards = append(s.shards, sh)
	}
	s.stats.Shards = s.opts.shards
	return s, nil
}

var errInUse = errors.New("goaway: build returned a *grpc.Server already in use; it must build a new one each call")

func (s *Server) newShard() (*shard, error) {
	srv := s.build()
	if srv == nil {
		return nil, errors.New("goaway: build returned a nil *grpc.Server")
	}
	// A server shared by two shards would be drained with both: the
	// round's GracefulStop would close every shard at once.
	inUse := func(sh *shard) bool { return sh.srv == srv }
	if slices.ContainsFunc(s.shards, inUse) {
		return nil, errInUse
	}
	for sh := range s.draining {
		if inUse(sh) {
			return nil, errInUse
		}
	}
	s.gen++
	sh := &shard{srv: srv, lis: newChanListener(), gen: s.gen}
	if s.lis != nil {
		sh.lis.addr = s.lis.Addr()
	}
	return sh, nil
}

// serveShard starts sh's grpc.Server; s.mu held.
func (s *Server) serveShard(sh *shard) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		sh.srv.Serve(sh.lis)
	}()
}

// Serve accepts connections on lis and hands each to a shard, round
// robin, until lis fails or the Server is stopped; it starts the
// goroutine that reads the overload signal. It returns nil after Stop or
// GracefulStop, lis's error otherwise (after closing lis), and
// ErrServerStopped if called twice or after a stop.
func (s *Server) Serve(lis net.Listener) error {
	s.mu.Lock()
	if s.serving || s.stopped {
		s.mu.Unlock()
		lis.Close()
		return ErrServerStopped
	}
	s.serving, s.lis = true, lis
	for _, sh := range s.shards {
		sh.lis.addr = lis.Addr()
		s.serveShard(sh)
	}
	if !s.manual {
		s.wg.Add(1)
		go s.tick()
	}
	s.mu.Unlock()

	var delay time.Duration
	for {
		c, err := lis.Accept()
		if err != nil {
			if s.isStopped() {
				return nil
			}
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
					continue
				case <-s.stop:
					return nil
				}
			}
			lis.Close()
			return err
		}
		delay = 0
		s.dispatch(c)
	}
}

func (s *Server) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// dispatch hands c to the next shard. A shard replaced meanwhile refuses
// it, and the next one is tried.
func (s *Server) dispatch(c net.Conn) {
	for {
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			c.Close()
			return
		}
		sh := s.shards[s.rr%len(s.shards)]
		s.rr++
		s.mu.Unlock()
		if sh.lis.deliver(c) {
			s.mu.Lock()
			s.stats.Conns++
			s.mu.Unlock()
			return
		}
	}
}

func (s *Server) tick() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.check)
	defer t.Stop()
	for {
		select {
		case <-s.halt: // not s.stop: a GracefulStop still ends graces
			return
		case now := <-t.C:
			s.Tick(now)
		}
	}
}

// Tick reads the overload signal at now and starts a GOAWAY round if one
// is due; it also moves earlier rounds on (see drainOldest) and stops
// the drained shards whose grace ended by now. Serve's goroutine calls it
// every check interval; it is exported as the explicit-time form of that
// decision, for tests and for callers with their own scheduling.
// Instants must not go backwards. During a GracefulStop it only ends
// graces; after a stop it does nothing.
func (s *Server) Tick(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.halted {
		return
	}
	for sh, d := range s.draining {
		switch {
		case d.graceNext:
			d.graceNext = false
			d.graceEnd = now.Add(s.opts.grace)
		case !d.goaway && !s.stopped && now.After(d.at):
			d.goaway = true
			if s.opts.grace > 0 {
				d.graceEnd = now.Add(s.opts.grace)
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				sh.srv.GracefulStop()
				s.mu.Lock()
				delete(s.draining, sh)
				s.mu.Unlock()
			}()
		case d.goaway && !d.graceEnd.IsZero() && !now.Before(d.graceEnd):
			d.graceEnd = time.Time{}
			s.stats.GraceExpired++
			s.wg.Add(1) // as the GracefulStop's: Stop and GracefulStop wait for it
			go func() {
				defer s.wg.Done()
				sh.srv.Stop() // the GracefulStop above then returns
			}()
		}
	}
	if s.stopped {
		return
	}
	if !s.overload.Saturated() {
		s.since, s.due = time.Time{}, time.Time{}
		return
	}
	if s.since.IsZero() {
		s.since = now
		s.due = now.Add(addSat(s.opts.sustain, scale(s.rand(), s.opts.every)))
	}
	if now.Before(s.due) {
		return
	}
	s.due = now.Add(scale(0.5+s.rand(), s.opts.every))
	if len(s.draining) >= s.opts.shards {
		s.stats.Skipped++
		return
	}
	s.drainOldest(now)
}

// scale returns f × d for f, d >= 0, math.MaxInt64 when that does not
// fit a Duration (a float64 beyond the int64 range does not convert).
func scale(f float64, d time.Duration) time.Duration {
	if p := f * float64(d); p < math.MaxInt64 {
		return time.Duration(p)
	}
	return math.MaxInt64
}

// addSat returns a + b for a, b >= 0, math.MaxInt64 when the sum
// overflows.
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// drainOldest puts a new shard in the place of the oldest one, which
// takes no new connection from now on; s.mu held. Its GOAWAY
// (GracefulStop) is sent at the next Tick, not at once: a connection
// handed to it just before may not yet be past the check with which
// grpc-go closes, without a GOAWAY, a connection accepted by a server
// that is stopping. A check interval later it is, unless the process
// cannot schedule a goroutine for that long.
func (s *Server) drainOldest(now time.Time) {
	i := 0
	for j, sh := range s.shards {
		if sh.gen < s.shards[i].gen {
			i = j
		}
	}
	fresh, err := s.newShard()
	if err != nil {
		s.stats.BuildErrors++
		return
	}
	old := s.shards[i]
	s.shards[i] = fresh
	if s.serving {
		s.serveShard(fresh)
	}
	old.lis.Close()
	s.draining[old] = &drain{at: now}
	s.stats.Drains++
}

// GracefulStop stops accepting, sends GOAWAY on every connection of
// every shard and waits for their calls to finish, as
// grpc.Server.GracefulStop does, with no bound for the shards in the
// rotation. A shard drained by a round keeps its [WithGrace] bound: the
// checks go on until GracefulStop returns, and stop it at the end of its
// grace. Stop, from another goroutine, cuts it short.
func (s *Server) GracefulStop() { s.stopAll(true) }

// Stop closes the listener and every connection of every shard at once;
// calls in flight fail, as with grpc.Server.Stop.
func (s *Server) Stop() { s.stopAll(false) }

func (s *Server) stopAll(graceful bool) {
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		close(s.stop)
		if s.lis != nil {
			s.lis.Close()
		}
	}
	servers := make([]*grpc.Server, 0, len(s.shards)+len(s.draining))
	for _, sh := range s.shards {
		servers = append(servers, sh.srv)
	}
	for sh, d := range s.draining {
		servers = append(servers, sh.srv)
		if graceful && !d.goaway {
			// Its GOAWAY is the GracefulStop below.
			d.goaway, d.graceNext = true, s.opts.grace > 0
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if graceful {
				srv.GracefulStop()
			} else {
				srv.Stop()
			}
		}()
	}
	wg.Wait()
	s.mu.Lock()
	if !s.halted {
		s.halted = true
		close(s.halt)
		clear(s.draining) // every shard is stopped
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Stats is a snapshot of a [Server], for logs and metrics, copied out
// under its lock. It is a plain value with no lock of its own: safe to
// copy and to read from several goroutines, not to write from several at
// once. The zero value counts nothing.
type Stats struct {
	Shards        int       // shards serving new connections
	Draining      int       // drained shards still finishing their calls
	Conns         uint64    // connections handed to shards
	Drains        uint64    // GOAWAY rounds: shards drained
	Skipped       uint64    // rounds due but not started: WithShards shards were already draining
	GraceExpired  uint64    // drained shards stopped at the end of their grace
	BuildErrors   uint64    // rounds not started because build returned nil or a server in use
	OverloadSince time.Time // start of the current overload, zero when none
}

// Stats returns a snapshot. It takes a lock; do not call it on a request
// path.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Draining = len(s.draining)
	st.OverloadSince = s.since
	return st
}
