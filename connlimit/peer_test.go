package connlimit

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// dialFrom connects to l from the loopback address src (Linux routes all
// of 127.0.0.0/8 to lo; "": the system's choice), as dial does.
func dialFrom(t *testing.T, l *Listener, src string) net.Conn {
	t.Helper()
	var d net.Dialer
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", l.Addr().String())
	if errors.Is(err, syscall.ECONNRESET) {
		return resetConn{}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestMaxConnsPerPeer: beyond its cap a client's connection is reset while
// another client's is admitted; closing one (twice) makes room once.
func TestMaxConnsPerPeer(t *testing.T) {
	for _, mode := range []Mode{Refuse, Hold} {
		t.Run(mode.String(), func(t *testing.T) {
			l := newLoopback(t, WithMaxConnsPerPeer(2), WithMaxConns(10), WithMode(mode))
			a := startAccept(l)
			dialFrom(t, l, "127.0.0.1")
			dialFrom(t, l, "127.0.0.1")
			s1, s2 := a.next(t), a.next(t)
			if !refused(t, dialFrom(t, l, "127.0.0.1")) {
				t.Fatal("third connection from 127.0.0.1 under WithMaxConnsPerPeer(2) was not refused")
			}
			other := dialFrom(t, l, "127.0.0.2")
			s3 := a.next(t)
			if _, err := s3.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if refused(t, other) {
				t.Fatal("a connection from another client was refused")
			}
			if st := l.Stats(); st.Open != 3 || st.Peers != 2 || st.RefusedPeer != 1 || st.RefusedCap != 0 || st.MaxConnsPerPeer != 2 {
				t.Fatalf("Stats() = %+v, want Open 3, Peers 2, RefusedPeer 1, MaxConnsPerPeer 2", st)
			}
			s1.Close()
			s1.Close() // frees its place once
			dialFrom(t, l, "127.0.0.1")
			s4 := a.next(t)
			if !refused(t, dialFrom(t, l, "127.0.0.1")) {
				t.Fatal("connection from 127.0.0.1 beyond its cap after a close was not refused")
			}
			for _, s := range []net.Conn{s2, s3, s4} {
				s.Close()
			}
			if st := l.Stats(); st.Open != 0 || st.Peers != 0 || st.RefusedPeer != 2 {
				t.Fatalf("Stats() after closing all = %+v, want Open 0, Peers 0, RefusedPeer 2", st)
			}
		})
	}
}

// TestMaxConnsPerPeerOnly: a cap per client alone wraps the connections,
// and a refusal by the rate gives the client's place back.
func TestMaxConnsPerPeerOnly(t *testing.T) {
	l := newLoopback(t, WithMaxConnsPerPeer(1), WithRate(1, 1))
	a := startAccept(l)
	dialFrom(t, l, "127.0.0.1")
	s := a.next(t)
	if _, ok := s.(*tcpConn); !ok { // the wrapper of a *net.TCPConn
		t.Fatalf("Accept() under a cap per client = %T, want the wrapper", s)
	}
	s.Close()
	// The bucket is empty now: this one is refused by the rate, and must
	// not keep 127.0.0.1's place.
	if !refused(t, dialFrom(t, l, "127.0.0.1")) {
		t.Fatal("connection beyond the rate was not refused")
	}
	if st := l.Stats(); st.Peers != 0 || st.RefusedRate != 1 || st.RefusedPeer != 0 {
		t.Fatalf("Stats() = %+v, want Peers 0, RefusedRate 1", st)
	}
}
