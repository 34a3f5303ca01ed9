package connlimit

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/levee-go/levee/ratelimit"
)

// newLoopback returns a Listener on a free loopback port, closed at the
// end of the test.
func newLoopback(t *testing.T, opts ...Option) *Listener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewListener(inner, opts...)
	if err != nil {
		inner.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// acceptor runs Accept in a goroutine and hands out what it returns.
type acceptor struct {
	conns chan net.Conn
	errs  chan error
}

func startAccept(l *Listener) *acceptor {
	a := &acceptor{conns: make(chan net.Conn, 64), errs: make(chan error, 1)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				a.errs <- err
				return
			}
			a.conns <- c
		}
	}()
	return a
}

func (a *acceptor) next(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-a.conns:
		return c
	case err := <-a.errs:
		t.Fatalf("Accept() = %v, want a connection", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Accept() returned nothing in 5 s")
	}
	return nil
}

// dial connects to l. A reset can arrive before connect returns; dial
// then returns a conn whose reads fail as the reset would have made them.
func dial(t *testing.T, l *Listener) net.Conn {
	t.Helper()
	return dialFrom(t, l, "")
}

// resetConn stands for a connection reset while connecting.
type resetConn struct{ net.Conn }

func (resetConn) Read([]byte) (int, error)        { return 0, syscall.ECONNRESET }
func (resetConn) SetReadDeadline(time.Time) error { return nil }

// refused reports whether the server reset or closed c without a byte.
func refused(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("no answer from the server in 5 s")
	}
	return err != nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF))
}

// TestMaxConns: beyond the cap a connection is reset at once; closing an
// admitted one makes room, and closing it twice makes room once.
func TestMaxConns(t *testing.T) {
	l := newLoopback(t, WithMaxConns(2))
	a := startAccept(l)
	c1, c2 := dial(t, l), dial(t, l)
	s1, s2 := a.next(t), a.next(t)
	for _, s := range []net.Conn{s1, s2} { // admitted: the server can write
		if _, err := s.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []net.Conn{c1, c2} {
		if refused(t, c) {
			t.Fatal("an admitted connection was refused")
		}
	}
	c3 := dial(t, l)
	if !refused(t, c3) {
		t.Fatal("third connection under WithMaxConns(2) was not refused")
	}
	if st := l.Stats(); st.Open != 2 || st.Peak != 2 || st.Accepted != 2 || st.RefusedCap != 1 || st.MaxConns != 2 {
		t.Fatalf("Stats() = %+v, want Open 2, Peak 2, Accepted 2, RefusedCap 1, MaxConns 2", st)
	}
	s1.Close()
	s1.Close() // frees its place once
	if got := l.Open(); got != 1 {
		t.Fatalf("after closing one twice: Open() = %d, want 1", got)
	}
	dial(t, l)
	a.next(t)
	if !refused(t, dial(t, l)) {
		t.Fatal("connection beyond the cap after a close was not refused")
	}
	if st := l.Stats(); st.Open != 2 || st.Accepted != 3 || st.RefusedCap != 2 {
		t.Fatalf("Stats() = %+v, want Open 2, Accepted 3, RefusedCap 2", st)
	}
	s2.Close()
}

// TestSetMaxConns lowers and lifts the cap while serving.
func TestSetMaxConns(t *testing.T) {
	l := newLoopback(t, WithMaxConns(3))
	a := startAccept(l)
	var open []net.Conn
	for range 3 {
		dial(t, l)
		open = append(open, a.next(t))
	}
	if err := l.SetMaxConns(2); err != nil {
		t.Fatal(err)
	}
	if !refused(t, dial(t, l)) {
		t.Fatal("after SetMaxConns(2) with 3 open: a new connection was not refused")
	}
	open[0].Close()
	if !refused(t, dial(t, l)) {
		t.Fatal("after SetMaxConns(2) with 2 open: a new connection was not refused")
	}
	open[1].Close()
	dial(t, l)
	open = append(open, a.next(t))
	if err := l.SetMaxConns(-1); err == nil || err.Error() != "connlimit: SetMaxConns: n must be >= 0, got -1" {
		t.Errorf("SetMaxConns(-1) = %v, want an error naming it", err)
	}
	if got := l.MaxConns(); got != 2 {
		t.Errorf("after SetMaxConns(-1): MaxConns() = %d, want 2 (unchanged)", got)
	}
	for _, c := range open {
		c.Close()
	}
}

// TestRate drives the token bucket with injected time: a burst of 2,
// then one connection per second.
func TestRate(t *testing.T) {
	l := newLoopback(t, WithRate(1, 2))
	base := time.Now()
	var offset atomic.Int64
	l.now = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	a := startAccept(l)
	steps := []struct {
		at   time.Duration
		want bool // admitted
	}{{0, true}, {0, true}, {0, false}, {500 * time.Millisecond, false}, {time.Second, true}, {time.Second, false}, {3 * time.Second, true}}
	for i, s := range steps {
		offset.Store(int64(s.at))
		c := dial(t, l)
		if s.want {
			sc := a.next(t)
			sc.Write([]byte("x"))
			if refused(t, c) {
				t.Fatalf("step %d: connection at +%v refused, want admitted", i, s.at)
			}
			sc.Close()
		} else if !refused(t, c) {
			t.Fatalf("step %d: connection at +%v admitted, want refused", i, s.at)
		}
	}
	if st := l.Stats(); st.Accepted != 4 || st.RefusedRate != 3 || st.RefusedCap != 0 || st.Open != 0 {
		t.Errorf("Stats() = %+v, want Accepted 4, RefusedRate 3, Open 0", st)
	}
	if l.RateLimiter() == nil || l.RateLimiter().Limit() != 1 {
		t.Errorf("RateLimiter() = %v, want the bucket of WithRate(1, 2)", l.RateLimiter())
	}
}

// TestRateUnderCap: a connection refused for the rate gives its place
// under the cap back.
func TestRateUnderCap(t *testing.T) {
	l := newLoopback(t, WithMaxConns(5), WithRate(ratelimit.Every(time.Hour), 1))
	a := startAccept(l)
	dial(t, l)
	s := a.next(t)
	if !refused(t, dial(t, l)) {
		t.Fatal("second connection within an hour was not refused")
	}
	if st := l.Stats(); st.Open != 1 || st.RefusedRate != 1 {
		t.Errorf("Stats() = %+v, want Open 1 (the refused one gave its place back), RefusedRate 1", st)
	}
	s.Close()
}

// TestHold: beyond the cap Accept waits until a connection closes; the
// waiting client is then served, not refused.
func TestHold(t *testing.T) {
	l := newLoopback(t, WithMaxConns(1), WithMode(Hold))
	a := startAccept(l)
	dial(t, l)
	s1 := a.next(t)
	c2 := dial(t, l)
	select {
	case c := <-a.conns:
		c.Close()
		t.Fatal("Accept returned a second connection under WithMaxConns(1) in Hold mode")
	case <-time.After(50 * time.Millisecond):
	}
	s1.Close()
	s2 := a.next(t)
	s2.Write([]byte("x"))
	if refused(t, c2) {
		t.Fatal("the held connection was refused after a place freed")
	}
	s2.Close()
	if st := l.Stats(); st.RefusedCap != 0 || st.Accepted != 2 {
		t.Errorf("Stats() = %+v, want Accepted 2, RefusedCap 0", st)
	}
}

// TestHoldClose: Close releases an Accept held beyond the cap.
func TestHoldClose(t *testing.T) {
	l := newLoopback(t, WithMaxConns(1), WithMode(Hold), WithRate(ratelimit.Every(time.Hour), 1))
	a := startAccept(l)
	dial(t, l)
	s := a.next(t)
	defer s.Close()
	l.Close()
	select {
	case err := <-a.errs:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("held Accept after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held Accept did not return within 5 s of Close")
	}
}

func TestAcceptAfterClose(t *testing.T) {
	l := newLoopback(t)
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept() after Close = %v, want net.ErrClosed", err)
	}
}

// TestUncappedUnwrapped: without a cap Accept returns the connection the
// inner listener made (grpc-go then sets TCP_USER_TIMEOUT on it); under
// a cap the wrapper keeps SyscallConn and NetConn.
func TestUncappedUnwrapped(t *testing.T) {
	l := newLoopback(t, WithRate(1000, 10))
	a := startAccept(l)
	dial(t, l)
	c := a.next(t)
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Errorf("uncapped Accept() returned %T, want *net.TCPConn", c)
	}

	l2 := newLoopback(t, WithMaxConns(1))
	a2 := startAccept(l2)
	dial(t, l2)
	c2 := a2.next(t)
	defer c2.Close()
	if _, ok := c2.(syscall.Conn); !ok {
		t.Fatalf("capped Accept() returned %T, without SyscallConn", c2)
	}
	if nc, ok := c2.(interface{ NetConn() net.Conn }); !ok {
		t.Errorf("capped Accept() returned %T, without NetConn", c2)
	} else if _, ok := nc.NetConn().(*net.TCPConn); !ok {
		t.Errorf("NetConn() = %T, want *net.TCPConn", nc.NetConn())
	}
}

// TestNewListenerErrors: every bad option value is reported, by its
// option and value.
func TestNewListenerErrors(t *testing.T) {
	tests := []struct {
		name string
		give []Option
		want []string
	}{
		{"negative cap", []Option{WithMaxConns(-1)}, []string{"connlimit: WithMaxConns: n must be >= 0, got -1"}},
		{"negative cap per peer", []Option{WithMaxConnsPerPeer(-1)}, []string{"connlimit: WithMaxConnsPerPeer: n must be >= 0, got -1"}},
		{"rate 0", []Option{WithRate(0, 1)}, []string{"connlimit: WithRate: rate must be > 0, got 0"}},
		{"burst 0", []Option{WithRate(10, 0)}, []string{"connlimit: WithRate: burst must be >= 1, got 0"}},
		{"bad mode", []Option{WithMode(7)}, []string{"connlimit: WithMode: unknown mode 7"}},
		{"all", []Option{WithMaxConns(-2), WithRate(-1, -1), WithMode(9)}, []string{
			"WithMaxConns: n must be >= 0, got -2", "WithRate: rate must be > 0, got -1",
			"WithRate: burst must be >= 1, got -1", "WithMode: unknown mode 9",
		}},
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	for _, tt := range tests {
		l, err := NewListener(inner, tt.give...)
		if l != nil || err == nil {
			t.Fatalf("%s: NewListener(...) = %v, %v; want nil and an error", tt.name, l, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: NewListener(...) error = %q, want it to contain %q", tt.name, err, w)
			}
		}
	}
	if l, err := NewListener(inner, nil); err != nil || l.MaxConns() != 0 || l.RateLimiter() != nil {
		t.Errorf("NewListener(inner, nil) = %v, %v; want a listener capping nothing", l, err)
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[Mode]string{Refuse: "refuse", Hold: "hold", 5: "Mode(5)"} {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d).String() = %q, want %q", m, got, want)
		}
	}
}

// TestHoldRateRaised: an Accept held for a token sees a rate raised
// through RateLimiter while it waits, instead of sleeping out the wait
// the old rate gave it (an hour here).
func TestHoldRateRaised(t *testing.T) {
	l := newLoopback(t, WithMode(Hold), WithRate(ratelimit.Every(time.Hour), 1))
	a := startAccept(l)
	dial(t, l)
	s1 := a.next(t) // the only token of the hour
	defer s1.Close()
	c2 := dial(t, l)
	select {
	case c := <-a.conns:
		c.Close()
		t.Fatal("Accept returned a second connection within the hour in Hold mode")
	case <-time.After(50 * time.Millisecond): // Accept now waits for the next token
	}
	if err := l.RateLimiter().SetLimit(1000); err != nil {
		t.Fatal(err)
	}
	s2 := a.next(t)
	s2.Write([]byte("x"))
	if refused(t, c2) {
		t.Fatal("the held connection was refused after the rate was raised")
	}
	s2.Close()
}

// heldAccepts returns how many goroutines wait in waitRoom for a place or
// a token, parked (not running), from the goroutines' stacks.
func heldAccepts() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "connlimit.(*Listener).waitRoom") && strings.Contains(g, " [select") {
			n++
		}
	}
	return n
}

// TestHoldWakesEveryPlace: several goroutines held in Accept at the cap
// (a pool of workers, each serving the connection it got before it calls
// Accept again); when two places open at once (SetMaxConns raising the
// cap by two), two of them wake and two waiting clients are served, not
// one while a place stays free.
func TestHoldWakesEveryPlace(t *testing.T) {
	l := newLoopback(t, WithMaxConns(1), WithMode(Hold))
	dial(t, l)
	first, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	const workers = 3
	got := make(chan net.Conn, workers)
	errs := make(chan error, workers)
	for range workers {
		go func() { // one Accept each: the worker would serve what it got
			c, err := l.Accept()
			if err != nil {
				errs <- err
				return
			}
			got <- c
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for heldAccepts() < workers {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d Accepts held after 5 s", heldAccepts(), workers)
		}
		time.Sleep(time.Millisecond)
	}
	if err := l.SetMaxConns(3); err != nil {
		t.Fatal(err)
	}
	dial(t, l)
	dial(t, l)
	for i := range 2 {
		select {
		case c := <-got:
			defer c.Close()
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of 2 clients served within 5 s of two places opening; Stats() = %+v", i, l.Stats())
		}
	}
	dial(t, l) // beyond the cap: held
	select {
	case c := <-got:
		c.Close()
		t.Fatal("a fourth connection accepted under SetMaxConns(3) in Hold mode")
	case <-time.After(50 * time.Millisecond):
	}
	l.Close()
	if err := <-errs; !errors.Is(err, net.ErrClosed) {
		t.Errorf("the Accept still held at Close = %v, want net.ErrClosed", err)
	}
}

// pipeListener is a listener whose Accept returns c, one end of
// net.Pipe: a connection without CloseWrite.
type pipeListener struct {
	net.Listener
	c net.Conn
}

func (p pipeListener) Accept() (net.Conn, error) { return p.c, nil }

// TestCloseWrite: under a cap the wrapper keeps CloseWrite of a
// connection that has it, the half-close net/http's server sends before
// closing a connection whose client may still be writing, so that its
// last response is not lost to a reset; a connection without it (a
// pipe) gets no CloseWrite from the wrapper.
func TestCloseWrite(t *testing.T) {
	l := newLoopback(t, WithMaxConns(1))
	a := startAccept(l)
	c := dial(t, l)
	s := a.next(t)
	cw, ok := s.(interface{ CloseWrite() error })
	if !ok {
		s.Close()
		t.Fatalf("capped Accept() returned %T, without the CloseWrite of *net.TCPConn", s)
	}
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite() = %v", err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(c); string(b) != "x" || err != nil {
		t.Errorf("client read %q, %v after the server's CloseWrite; want \"x\" and EOF", b, err)
	}
	if _, err := c.Write([]byte("y")); err != nil { // half-closed: the client still writes
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(s, b[:]); err != nil || b[0] != 'y' {
		t.Errorf("server read %q, %v after its CloseWrite; want \"y\"", b[:], err)
	}
	s.Close()
	if got := l.Open(); got != 0 {
		t.Errorf("after Close: Open() = %d, want 0", got)
	}

	ps, pc := net.Pipe()
	defer pc.Close()
	pl, err := NewListener(pipeListener{newLoopback(t), ps}, WithMaxConns(1))
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	wc, err := pl.Accept()
	if _, ok := wc.(interface{ CloseWrite() error }); ok || err != nil {
		t.Errorf("Accept() of a pipe = %T, %v; want the wrapper without CloseWrite, which the pipe has not", wc, err)
	}
	if err == nil {
		wc.Close()
	}
}

// chanListener is an inner listener whose Accept returns the connections
// sent on conns, and counts the goroutines waiting in it.
type chanListener struct {
	conns    chan net.Conn
	inAccept atomic.Int32
	closed   chan struct{}
	once     sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{conns: make(chan net.Conn, 8), closed: make(chan struct{})}
}

func (c *chanListener) Accept() (net.Conn, error) {
	c.inAccept.Add(1)
	defer c.inAccept.Add(-1)
	select {
	case conn := <-c.conns:
		return conn, nil
	case <-c.closed:
		return nil, net.ErrClosed
	}
}

func (c *chanListener) Close() error   { c.once.Do(func() { close(c.closed) }); return nil }
func (c *chanListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// pipeConn returns one end of a net.Pipe whose other end is closed at the
// end of the test.
func pipeConn(t *testing.T) net.Conn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a
}

// waitCond polls cond for up to 5 s.
func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
	}
}

// TestHoldWakesNoMoreThanPlaces: a held Accept woken for a freed place
// hands the wake-up on only for a place no other Accept is already
// heading for. Two places free one after the other wake two Accepts, which
// wait in the inner Accept for clients; when the first is served, the
// second place is the other woken Accept's, so the third stays held, and
// a third client waits in the accept queue instead of being refused
// (reset) at the cap.
func TestHoldWakesNoMoreThanPlaces(t *testing.T) {
	inner := newChanListener()
	l, err := NewListener(inner, WithMaxConns(2), WithMode(Hold))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var open [2]net.Conn
	for i := range open {
		inner.conns <- pipeConn(t)
		if open[i], err = l.Accept(); err != nil {
			t.Fatal(err)
		}
	}
	const workers = 3
	got := make(chan net.Conn, workers)
	errs := make(chan error, workers)
	for range workers {
		go func() {
			c, err := l.Accept()
			if err != nil {
				errs <- err
				return
			}
			got <- c
		}()
	}
	waitCond(t, "3 Accepts held", func() bool { return l.sleepers.Load() == workers })
	open[0].Close()
	waitCond(t, "one Accept woken into the inner Accept", func() bool {
		return inner.inAccept.Load() == 1 && l.sleepers.Load() == workers-1
	})
	open[1].Close()
	waitCond(t, "two Accepts woken into the inner Accept", func() bool {
		return inner.inAccept.Load() == 2 && l.sleepers.Load() == workers-2
	})
	inner.conns <- pipeConn(t)
	c1 := <-got
	defer c1.Close()
	// One place is left, and one Accept already waits for a client to
	// take it: the third must stay held.
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if l.sleepers.Load() != 1 {
			t.Errorf("a third Accept woke for two places (%d in the inner Accept)", inner.inAccept.Load())
			break
		}
	}
	inner.conns <- pipeConn(t)
	c2 := <-got
	defer c2.Close()
	inner.conns <- pipeConn(t) // beyond the cap: held in the queue
	time.Sleep(100 * time.Millisecond)
	if st := l.Stats(); st.RefusedCap != 0 {
		t.Errorf("Hold mode refused %d connections at the cap; want them held", st.RefusedCap)
	}
	l.Close()
	for range workers - 2 {
		if err := <-errs; !errors.Is(err, net.ErrClosed) {
			t.Errorf("the Accept still held at Close = %v, want net.ErrClosed", err)
		}
	}
}

// TestReadFrom: a capped connection of a *net.TCPConn keeps its ReadFrom,
// through which net/http's server writes a file's body (sendfile) when the
// connection has it; the wrapper hid it, and the body was copied through
// the process. A file written through it arrives whole.
func TestReadFrom(t *testing.T) {
	l := newLoopback(t, WithMaxConns(1))
	a := startAccept(l)
	c := dial(t, l)
	s := a.next(t)
	defer s.Close()
	rf, ok := s.(io.ReaderFrom)
	if !ok {
		t.Fatalf("capped Accept() returned %T, without the ReadFrom of *net.TCPConn", s)
	}
	want := bytes.Repeat([]byte("levee "), 100_000)
	path := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		got <- b
	}()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := rf.ReadFrom(f); n != int64(len(want)) || err != nil {
		t.Errorf("ReadFrom(file) = %d, %v; want %d, nil", n, err, len(want))
	}
	s.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Errorf("client read %d bytes, want the file's %d", len(b), len(want))
	}
}
