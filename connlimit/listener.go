package connlimit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/levee-go/levee/internal/peeraddr"
	"github.com/levee-go/levee/ratelimit"
)

// Option configures a [Listener]. An option only records its value;
// [NewListener] validates them all and reports every bad one. A nil
// Option is ignored.
type Option func(*options)

type options struct {
	maxConns int
	perPeer  int
	rate     ratelimit.Limit
	burst    int
	hasRate  bool
	mode     Mode
}

// Mode says what a [Listener] does with a connection beyond its caps.
// The zero value is Refuse.
type Mode uint8

const (
	// Refuse accepts the connection and closes it at once with a TCP
	// reset (SO_LINGER 0): the client learns in one round trip that this
	// server will not serve it, and a gRPC client reports the address as
	// unavailable, backs off and tries its other addresses. The server
	// spends an accept and a close, no goroutine and no lasting file
	// descriptor, and leaves no TIME_WAIT socket behind. The default.
	Refuse Mode = iota
	// Hold stops calling Accept until a connection closes (or a token is
	// due): new connections wait in the kernel's accept queue, completed
	// by the kernel but unanswered, and once that queue is full the
	// kernel drops their SYNs, which clients retransmit. The server
	// spends nothing on them; their clients hang until their own connect
	// timeout (20 s for grpc-go) instead of moving on.
	Hold
)

// String returns "refuse" or "hold".
func (m Mode) String() string {
	switch m {
	case Refuse:
		return "refuse"
	case Hold:
		return "hold"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// WithMaxConns caps the connections open at once at n; 0, the default,
// means no cap. A connection counts from Accept until its Close, so one
// that never completes its handshake holds its place until the server
// gives up on it: 120 s by default in grpc-go, shorten it with
// grpc.ConnectionTimeout when capping. n must be >= 0.
func WithMaxConns(n int) Option {
	return func(o *options) { o.maxConns = n }
}

// WithMaxConnsPerPeer caps the connections open at once from one client
// at n, by IP address; an IPv6 client by its /64 prefix, as one host or
// site may use every address of it. 0, the default, means no cap. A
// connection beyond it is refused (reset at once) whatever the [Mode]:
// holding it back would hold every other client's too. A connection whose
// remote address is not an IP address (a Unix socket) is not capped by
// it. n must be >= 0.
//
// Many clients behind one address (a NAT, a proxy, a node's SNAT) share
// the cap: set it above what they open together.
func WithMaxConnsPerPeer(n int) Option {
	return func(o *options) { o.perPeer = n }
}

// WithRate limits new connections to r per second with bursts of burst
// (a [ratelimit.Limiter]); by default there is no rate limit. r must be
// > 0 and burst >= 1.
func WithRate(r ratelimit.Limit, burst int) Option {
	return func(o *options) { o.rate, o.burst, o.hasRate = r, burst, true }
}

// WithMode sets what is done with a connection beyond the caps. Default
// [Refuse].
func WithMode(m Mode) Option {
	return func(o *options) { o.mode = m }
}

func (o *options) validate() error {
	var errs []error
	if o.maxConns < 0 {
		errs = append(errs, fmt.Errorf("connlimit: WithMaxConns: n must be >= 0, got %d", o.maxConns))
	}
	if o.perPeer < 0 {
		errs = append(errs, fmt.Errorf("connlimit: WithMaxConnsPerPeer: n must be >= 0, got %d", o.perPeer))
	}
	if o.hasRate {
		if !(o.rate > 0) {
			errs = append(errs, fmt.Errorf("connlimit: WithRate: rate must be > 0, got %v", float64(o.rate)))
		}
		if o.burst < 1 {
			errs = append(errs, fmt.Errorf("connlimit: WithRate: burst must be >= 1, got %d", o.burst))
		}
	}
	if o.mode != Refuse && o.mode != Hold {
		errs = append(errs, fmt.Errorf("connlimit: WithMode: unknown mode %d", uint8(o.mode)))
	}
	return errors.Join(errs...)
}

// Listener is a net.Listener that caps the connections open at once, in
// all and from one client, and the rate of new ones, and answers the
// connections beyond the caps cheaply (see [Mode]). Use it as the listener
// of grpc.Server.Serve.
//
// A connection returned by Accept is wrapped so that its Close frees its
// place; the wrapper keeps SyscallConn (for socket options) and, when the
// accepted connection has them, CloseWrite (net/http's server half-closes
// a connection before closing it, so that a client still writing does
// not lose the last response to a reset) and ReadFrom (through which
// net/http writes a file's body with sendfile), and NetConn returns the
// original. Without a cap on open connections (in all or per
// peer), Accept returns the original connection unwrapped. One consequence of the wrapper:
// grpc-go sets TCP_USER_TIMEOUT (its keepalive timeout) only on a
// *net.TCPConn, so on a capped listener a dead peer with unacknowledged
// data is detected by keepalive pings alone.
//
// Create a Listener with [NewListener]; the zero value is not usable. By
// default it caps nothing (pass [WithMaxConns], [WithMaxConnsPerPeer] or
// [WithRate]). It is safe for concurrent use; Accept may be called from
// several goroutines.
type Listener struct {
	inner   net.Listener
	mode    Mode
	max     atomic.Int64 // 0: no cap
	perPeer int          // 0: no cap
	rate    *ratelimit.Limiter
	now     func() time.Time // the clock for the rate limit; tests replace it

	open        atomic.Int64
	accepted    atomic.Uint64
	refusedCap  atomic.Uint64
	refusedPeer atomic.Uint64
	refusedRate atomic.Uint64
	peak        atomic.Int64

	peerMu sync.Mutex
	peers  map[netip.Addr]int // open connections by client; only clients with one

	freed     chan struct{} // Hold: a place was freed or the cap raised (buffered, 1)
	sleepers  atomic.Int32  // Hold: Accepts waiting on freed for a place
	claims    atomic.Int64  // Hold: Accepts that saw room and have not yet taken a place or given up
	closed    chan struct{}
	closeOnce sync.Once
}

// NewListener wraps inner. It returns an error naming every bad option
// value; inner is left open then. It panics if inner is nil.
func NewListener(inner net.Listener, opts ...Option) (*Listener, error) {
	if inner == nil {
		panic("connlimit: NewListener with nil net.Listener")
	}
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	l := &Listener{
		inner:   inner,
		mode:    o.mode,
		perPeer: o.perPeer,
		now:     time.Now,
		freed:   make(chan struct{}, 1),
		closed:  make(chan struct{}),
	}
	if o.perPeer > 0 {
		l.peers = map[netip.Addr]int{}
	}
	l.max.Store(int64(o.maxConns))
	if o.hasRate {
		var err error
		if l.rate, err = ratelimit.NewLimiter(o.rate, o.burst); err != nil {
			return nil, fmt.Errorf("connlimit: WithRate: %w", err)
		}
	}
	return l, nil
}

// SetMaxConns changes the cap on open connections; 0 removes it.
// Connections already open above a lowered cap stay open; new ones wait
// or are refused until the count is below it. It returns an error, and
// changes nothing, if n < 0. Raising the cap from 0 counts only the
// connections accepted from then on.
func (l *Listener) SetMaxConns(n int) error {
	if n < 0 {
		return fmt.Errorf("connlimit: SetMaxConns: n must be >= 0, got %d", n)
	}
	l.max.Store(int64(n))
	l.signalFreed()
	return nil
}

// MaxConns returns the cap on open connections, 0 for none.
func (l *Listener) MaxConns() int { return int(l.max.Load()) }

// RateLimiter returns the token bucket of [WithRate], for changing its
// rate and burst while serving (SetLimit, SetBurst, SetScale), or nil
// when there is none. In [Hold] mode an Accept waiting for a token sees
// a change within 100 ms.
func (l *Listener) RateLimiter() *ratelimit.Limiter { return l.rate }

// Accept waits for and returns the next connection within the caps. With
// [Refuse] it closes every connection beyond them as it arrives; with
// [Hold] it waits, without accepting, until one fits the cap on open
// connections and the rate (a connection beyond its client's cap is
// refused either way); of several goroutines held in Accept, as many
// wake as places open. It returns the inner listener's errors as they
// are, and net.ErrClosed after Close.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		if l.mode == Hold {
			if err := l.waitRoom(); err != nil {
				return nil, err
			}
			l.claims.Add(1)
		}
		c, err := l.inner.Accept()
		if err != nil {
			l.unclaim()
			select {
			case <-l.closed:
				return nil, net.ErrClosed
			default:
			}
			return nil, err
		}
		counted, peer, ok := l.admit(c)
		l.unclaim() // after admit's place, if any, is counted in open
		if !ok {
			refuse(c)
			continue
		}
		l.accepted.Add(1)
		if !counted && !peer.IsValid() {
			return c, nil
		}
		return l.wrap(c, counted, peer), nil
	}
}

// admit takes a place under the cap, a place under c's client's cap and
// a token, or none of them. It reports whether it took a place under the
// cap, and the client whose place it took (the zero Addr: none). In Hold
// mode waitRoom made room and a token likely; a concurrent Accept can
// still take them first, and then this connection is refused rather than
// held open above the cap.
func (l *Listener) admit(c net.Conn) (counted bool, peer netip.Addr, ok bool) {
	if max := l.max.Load(); max > 0 {
		for {
			n := l.open.Load()
			if n >= max {
				l.refusedCap.Add(1)
				return false, netip.Addr{}, false
			}
			if l.open.CompareAndSwap(n, n+1) {
				break
			}
		}
		counted = true
	}
	if l.perPeer > 0 {
		if peer = peeraddr.Client(c.RemoteAddr()); peer.IsValid() && !l.enterPeer(peer) {
			l.refusedPeer.Add(1)
			l.leave(counted, netip.Addr{})
			return false, netip.Addr{}, false
		}
	}
	if l.rate != nil && !l.rate.AllowN(l.now(), 1) {
		l.refusedRate.Add(1)
		l.leave(counted, peer)
		return false, netip.Addr{}, false
	}
	if counted {
		l.notePeak()
	}
	return counted, peer, true
}

// enterPeer takes a place under peer's cap, or reports false.
func (l *Listener) enterPeer(peer netip.Addr) bool {
	l.peerMu.Lock()
	defer l.peerMu.Unlock()
	n := l.peers[peer]
	if n >= l.perPeer {
		return false
	}
	l.peers[peer] = n + 1
	return true
}

// leave gives back a place under the cap (if counted) and under peer's
// cap (if valid).
func (l *Listener) leave(counted bool, peer netip.Addr) {
	if peer.IsValid() {
		l.peerMu.Lock()
		if n := l.peers[peer] - 1; n > 0 {
			l.peers[peer] = n
		} else {
			delete(l.peers, peer)
		}
		l.peerMu.Unlock()
	}
	if counted {
		l.release()
	}
}

func (l *Listener) notePeak() {
	n := l.open.Load()
	for {
		p := l.peak.Load()
		if n <= p || l.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

// rateRecheck is the longest a held Accept sleeps before it reads the
// rate limiter again.
const rateRecheck = 100 * time.Millisecond

// waitRoom blocks until the cap has room and a token is due, or the
// listener is closed.
func (l *Listener) waitRoom() error {
	for {
		select {
		case <-l.closed:
			return net.ErrClosed
		default:
		}
		if max := l.max.Load(); max > 0 && l.open.Load() >= max {
			if err := l.sleep(); err != nil {
				return err
			}
			continue
		}
		if l.rate == nil {
			return nil
		}
		wait := l.rate.RetryAfter(l.now(), 1)
		if wait <= 0 {
			return nil
		}
		// The rate may change meanwhile (RateLimiter's SetLimit, SetBurst,
		// SetScale), which signals nothing: look again at least every
		// rateRecheck rather than sleep out a wait an old rate gave.
		// It does not take a wake-up meant for an Accept waiting for a
		// place.
		t := time.NewTimer(min(wait, rateRecheck))
		select {
		case <-t.C:
		case <-l.closed:
			t.Stop()
			return net.ErrClosed
		}
	}
}

// sleep waits until a place may have been freed (or the cap raised), or
// the listener is closed; the caller looks again. One freed place wakes
// one sleeper; if more opened at once (SetMaxConns raising the cap,
// closes before anyone slept, whose signals fill freed's one slot), the
// woken Accept hands the wake-up on once it has its place (unclaim), so
// that as many sleepers wake as there are places, and no more: the
// others stay held.
func (l *Listener) sleep() error {
	l.sleepers.Add(1)
	defer l.sleepers.Add(-1)
	// A place freed before this sleeper was counted signalled nothing:
	// look again now that signalFreed will see it.
	if max := l.max.Load(); max == 0 || l.open.Load() < max {
		return nil
	}
	select {
	case <-l.freed:
		return nil
	case <-l.closed:
		return net.ErrClosed
	}
}

// unclaim ends the claim of a Hold Accept that saw room, once it has
// taken its place (or given up on it), and wakes an Accept waiting for a
// place if room is left that no other Accept has claimed: an Accept
// already woken for a place and waiting in the inner Accept for a client
// will take that place, and waking another for it would get the next
// client refused at the cap instead of held. Every claim ends here, so the
// last to end sees the room the others left.
func (l *Listener) unclaim() {
	if l.mode != Hold {
		return
	}
	claims := l.claims.Add(-1)
	if max := l.max.Load(); max == 0 || l.open.Load()+claims < max {
		l.signalFreed()
	}
}

func (l *Listener) release() {
	l.open.Add(-1)
	l.signalFreed()
}

// signalFreed wakes one Accept waiting for a place, if any waits: a load
// when none does (a close in Refuse mode, or in Hold below the cap).
func (l *Listener) signalFreed() {
	if l.sleepers.Load() == 0 {
		return
	}
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// refuse closes c with a reset: SO_LINGER 0 makes close send RST instead
// of FIN, so no TIME_WAIT socket is left on the server.
func refuse(c net.Conn) {
	if tc, ok := c.(interface{ SetLinger(int) error }); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// Close closes the inner listener and makes Accept return net.ErrClosed.
// Connections already accepted stay open.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.inner.Close()
}

// Addr returns the inner listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Open returns the number of connections accepted and not yet closed
// (counted only under a cap on open connections; 0 without).
func (l *Listener) Open() int { return int(l.open.Load()) }

// Stats is a snapshot of a [Listener]'s counters, for logs and metrics.
// It is a plain copy, with no synchronisation of its own: read it from
// any goroutine, but do not write one from several at once. The zero value
// counts nothing.
type Stats struct {
	Open            int    // connections open now (under a cap)
	Peak            int    // most connections open at once (under a cap)
	MaxConns        int    // the cap, 0 for none
	MaxConnsPerPeer int    // the cap per client, 0 for none
	Peers           int    // clients with a connection open (under a cap per client)
	Accepted        uint64 // connections returned by Accept
	RefusedCap      uint64 // connections beyond the cap on open connections, closed at once
	RefusedPeer     uint64 // connections beyond their client's cap, closed at once
	RefusedRate     uint64 // connections beyond the rate, closed at once
}

// Stats returns the counters. It reads atomics, and takes a lock to count
// the clients under a cap per client.
func (l *Listener) Stats() Stats {
	st := Stats{
		Open:            int(l.open.Load()),
		Peak:            int(l.peak.Load()),
		MaxConns:        int(l.max.Load()),
		MaxConnsPerPeer: l.perPeer,
		Accepted:        l.accepted.Load(),
		RefusedCap:      l.refusedCap.Load(),
		RefusedPeer:     l.refusedPeer.Load(),
		RefusedRate:     l.refusedRate.Load(),
	}
	if l.perPeer > 0 {
		l.peerMu.Lock()
		st.Peers = len(l.peers)
		l.peerMu.Unlock()
	}
	return st
}

// conn frees its places in the listener once, at its first Close.
type conn struct {
	net.Conn
	l       *Listener
	counted bool       // holds a place under the cap
	peer    netip.Addr // holds a place under this client's cap; zero: none
	closed  atomic.Bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.leave(c.counted, c.peer)
	}
	return err
}

// NetConn returns the connection the inner listener accepted.
func (c *conn) NetConn() net.Conn { return c.Conn }

// SyscallConn returns the raw connection of the accepted one, for socket
// options (grpc-go's channelz reads them through it).
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, fmt.Errorf("connlimit: %T has no SyscallConn", c.Conn)
}

// closeWriter is the half-close of a *net.TCPConn, a *net.UnixConn or a
// *tls.Conn, which servers find by a type assertion.
type closeWriter interface{ CloseWrite() error }

// closeWriteConn is a conn whose connection has CloseWrite; Accept
// returns it instead of a conn for such a connection, so that the
// wrapper has CloseWrite exactly when the connection has.
type closeWriteConn struct{ conn }

// CloseWrite shuts down the writing side of the connection.
func (c *closeWriteConn) CloseWrite() error { return c.Conn.(closeWriter).CloseWrite() }

// tcpConn is a closeWriteConn whose connection is also an io.ReaderFrom,
// as a *net.TCPConn is: net/http's server writes a file's body through
// ReadFrom (sendfile or splice, without copying it through the process)
// when the connection has it.
type tcpConn struct{ closeWriteConn }

// ReadFrom writes what r reads to the connection, through the
// connection's own ReadFrom.
func (c *tcpConn) ReadFrom(r io.Reader) (int64, error) { return c.Conn.(io.ReaderFrom).ReadFrom(r) }

// wrap returns c in the wrapper that frees its places, with the optional
// methods c has that servers look for: CloseWrite, and ReadFrom beside it
// (a *net.TCPConn).
func (l *Listener) wrap(c net.Conn, counted bool, peer netip.Addr) net.Conn {
	_, half := c.(closeWriter)
	_, rf := c.(io.ReaderFrom)
	switch {
	case half && rf:
		w := &tcpConn{}
		w.Conn, w.l, w.counted, w.peer = c, l, counted, peer
		return w
	case half:
		w := &closeWriteConn{}
		w.Conn, w.l, w.counted, w.peer = c, l, counted, peer
		return w
	}
	return &conn{Conn: c, l: l, counted: counted, peer: peer}
}
