package connlimit

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/levee-go/levee/ratelimit"
)

// Option configures a [Listener]. An option only records its value;
// [NewListener] validates them all and reports every bad one. A nil
// Option is ignored.
type Option func(*options)

type options struct {
	maxConns int
	rate     ratelimit.Limit
	burst    int
	hasRate  bool
	mode     Mode
}

// Mode says what a [Listener] does with a connection beyond its caps.
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

// Listener is a net.Listener that caps the connections open at once and
// the rate of new ones, and answers the connections beyond the caps
// cheaply (see [Mode]). Use it as the listener of grpc.Server.Serve.
//
// A connection returned by Accept is wrapped so that its Close frees its
// place; the wrapper keeps SyscallConn (for socket options) and NetConn
// returns the original. Without a cap on open connections, Accept returns
// the original connection unwrapped. One consequence of the wrapper:
// grpc-go sets TCP_USER_TIMEOUT (its keepalive timeout) only on a
// *net.TCPConn, so on a capped listener a dead peer with unacknowledged
// data is detected by keepalive pings alone.
//
// Create a Listener with [NewListener]; the zero value is not usable. By
// default it caps nothing (pass [WithMaxConns] or [WithRate]). It is safe
// for concurrent use; Accept may be called from several goroutines.
type Listener struct {
	inner net.Listener
	mode  Mode
	max   atomic.Int64 // 0: no cap
	rate  *ratelimit.Limiter
	now   func() time.Time // the clock for the rate limit; tests replace it

	open        atomic.Int64
	accepted    atomic.Uint64
	refusedCap  atomic.Uint64
	refusedRate atomic.Uint64
	peak        atomic.Int64

	freed     chan struct{} // Hold: a slot was freed (buffered, 1)
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
		inner:  inner,
		mode:   o.mode,
		now:    time.Now,
		freed:  make(chan struct{}, 1),
		closed: make(chan struct{}),
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
// when there is none.
func (l *Listener) RateLimiter() *ratelimit.Limiter { return l.rate }

// Accept waits for and returns the next connection within the caps. With
// [Refuse] it closes every connection beyond them as it arrives; with
// [Hold] it waits, without accepting, until one fits. It returns the
// inner listener's errors as they are, and net.ErrClosed after Close.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		if l.mode == Hold {
			if err := l.waitRoom(); err != nil {
				return nil, err
			}
		}
		c, err := l.inner.Accept()
		if err != nil {
			select {
			case <-l.closed:
				return nil, net.ErrClosed
			default:
			}
			return nil, err
		}
		if ok := l.admit(); !ok {
			refuse(c)
			continue
		}
		l.accepted.Add(1)
		if l.max.Load() == 0 {
			return c, nil
		}
		return &conn{Conn: c, l: l}, nil
	}
}

// admit takes a place under the cap and a token, or neither. In Hold
// mode waitRoom made both likely; a concurrent Accept can still take
// them first, and then this connection is refused rather than held open
// above the cap.
func (l *Listener) admit() bool {
	if max := l.max.Load(); max > 0 {
		for {
			n := l.open.Load()
			if n >= max {
				l.refusedCap.Add(1)
				return false
			}
			if l.open.CompareAndSwap(n, n+1) {
				break
			}
		}
		if l.rate != nil && !l.rate.AllowN(l.now(), 1) {
			l.release()
			l.refusedRate.Add(1)
			return false
		}
		l.notePeak()
		return true
	}
	if l.rate != nil && !l.rate.AllowN(l.now(), 1) {
		l.refusedRate.Add(1)
		return false
	}
	return true
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
			select {
			case <-l.freed:
			case <-l.closed:
				return net.ErrClosed
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
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-l.freed: // SetMaxConns or a close: look again
			t.Stop()
		case <-l.closed:
			t.Stop()
			return net.ErrClosed
		}
	}
}

func (l *Listener) release() {
	l.open.Add(-1)
	l.signalFreed()
}

func (l *Listener) signalFreed() {
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
// It is a plain value, safe to copy and share; the zero value counts
// nothing.
type Stats struct {
	Open        int    // connections open now (under a cap)
	Peak        int    // most connections open at once (under a cap)
	MaxConns    int    // the cap, 0 for none
	Accepted    uint64 // connections returned by Accept
	RefusedCap  uint64 // connections beyond the cap on open connections, closed at once
	RefusedRate uint64 // connections beyond the rate, closed at once
}

// Stats returns the counters; it reads atomics only.
func (l *Listener) Stats() Stats {
	return Stats{
		Open:        int(l.open.Load()),
		Peak:        int(l.peak.Load()),
		MaxConns:    int(l.max.Load()),
		Accepted:    l.accepted.Load(),
		RefusedCap:  l.refusedCap.Load(),
		RefusedRate: l.refusedRate.Load(),
	}
}

// conn frees its place in the listener once, at its first Close.
type conn struct {
	net.Conn
	l      *Listener
	closed atomic.Bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release()
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
