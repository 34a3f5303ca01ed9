package goaway

import (
	"net"
	"sync"
)

// chanListener is the net.Listener of one shard: Accept returns the
// connections dispatch delivers. Close makes Accept return net.ErrClosed
// and refuses further deliveries; it does not close the Server's
// listener.
type chanListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr // the Server's listener's; set before Serve
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

// deliver hands c to the shard's Accept; false if the listener closed
// first (c is then still the caller's).
func (l *chanListener) deliver(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr {
	if l.addr == nil {
		return chanAddr{}
	}
	return l.addr
}

type chanAddr struct{}

func (chanAddr) Network() string { return "goaway" }
func (chanAddr) String() string  { return "goaway-shard" }
