package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a loopback port that forwards to a target and
// delays the target's replies by a latency that can change at any time, to
// make a Redis slow. Data keeps its order and the proxy's throughput is
// not limited by the delay: each chunk is delivered at its arrival plus
// the latency in force when it arrived. Create one with NewProxy; it is
// closed, with every connection and goroutine it started, when the test
// ends. Its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // ns

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewProxy starts a proxy to target, with no added latency, and closes it
// when the test ends.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency makes the replies that arrive from now on wait d more.
func (p *Proxy) SetLatency(d time.Duration) { p.delay.Store(int64(d)) }

// Close stops the proxy, closes its connections and waits for its
// goroutines. Closing twice does nothing.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track records c, or closes it and reports false once the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			_ = down.Close()
			continue
		}
		if !p.track(down) || !p.track(up) {
			_ = down.Close()
			_ = up.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(down, up, false) // requests go straight through
		go p.pipe(up, down, true)  // replies are delayed
	}
}

type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies from src to dst until either side fails, then closes both.
// With delayed, each chunk is written at its arrival plus the latency.
func (p *Proxy) pipe(src, dst net.Conn, delayed bool) {
	defer p.wg.Done()
	defer src.Close()
	defer dst.Close()
	if !delayed {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	ch := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() { // the writer: owned by pipe, which waits for it
		defer close(done)
		for c := range ch {
			if d := time.Until(c.at); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				_ = src.Close()
				for range ch { // drain so the reader never blocks
				}
				return
			}
		}
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			ch <- chunk{buf[:n], time.Now().Add(time.Duration(p.delay.Load()))}
		}
		if err != nil {
			close(ch)
			<-done
			return
		}
	}
}
