package grpcguard

import (
	"context"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc/peer"
)

// TestStreamKindsBounded: the methods remembered as streams stop at
// maxStreamKinds, whatever names the stream interceptor sees (with a
// handler for unknown services it sees every name a client sends); those
// remembered first stay. Before, each new name copied the whole set: a
// flood of 50,000 names took minutes of CPU and kept every name.
func TestStreamKindsBounded(t *testing.T) {
	s := newStreams(0, 0)
	for i := range 5 * maxStreamKinds {
		s.noteStream(fmt.Sprintf("/junk.Svc/M%d", i))
	}
	if n := len(*s.kinds.Load()); n != maxStreamKinds {
		t.Errorf("%d names seen as streams: %d remembered, want maxStreamKinds (%d)", 5*maxStreamKinds, n, maxStreamKinds)
	}
	if !s.isStream("/junk.Svc/M0") || s.isStream(fmt.Sprintf("/junk.Svc/M%d", maxStreamKinds)) {
		t.Error("isStream: want the first names remembered, not those beyond the cap")
	}
}

// TestStreamCapPerPeerIPv6: an IPv6 client counts against its cap per
// client by its /64 prefix, as one host or site owns the whole prefix and
// may open each stream from another address of it. Before, each address
// was a client of its own: one client could fill the server's cap, and
// every other client's streams were refused.
func TestStreamCapPerPeerIPv6(t *testing.T) {
	s := newStreams(100, 2)
	from := func(ip string) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 4000}})
	}
	var held []string
	for i, ip := range []string{"2001:db8:1:2::a", "2001:db8:1:2::b"} {
		p, ok := s.enter(from(ip))
		if !ok {
			t.Fatalf("stream %d from %s refused, want admitted", i, ip)
		}
		held = append(held, p)
	}
	if _, ok := s.enter(from("2001:db8:1:2:ffff::c")); ok {
		t.Fatal("third stream from the same /64 admitted, want refused by the cap per client of 2")
	}
	if p, ok := s.enter(from("2001:db8:1:3::a")); !ok {
		t.Fatal("stream from another /64 refused, want admitted")
	} else {
		held = append(held, p)
	}
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "::ffff:10.0.0.3"} {
		if p, ok := s.enter(from(ip)); !ok {
			t.Fatalf("stream from %s refused, want admitted: IPv4 clients count by address", ip)
		} else {
			held = append(held, p)
		}
	}
	for _, p := range held {
		s.leave(p)
	}
	if st := s.stats(); st.Open != 0 || st.Peers != 0 || st.Refused != 1 {
		t.Fatalf("stats after every stream left = %+v, want none open, none by peer, 1 refused", st)
	}
}
