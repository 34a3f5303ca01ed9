package grpcguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/guardtest"
	"github.com/levee-go/levee/internal/methodkind"
)

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

// TestTapTellsTheKindsHandlersShowed: the tap admits the first call of a
// method as of unknown kind (admission.Call.StreamUnknown), its handler's
// start gives the kind, and the method's next calls are admitted as that
// kind. Before, the tap said unary for every method until one of its
// streams started: runlimit counted a burst of streams to a method not
// seen yet as a spike of unary calls while their handlers waited for the
// processor.
func TestTapTellsTheKindsHandlersShowed(t *testing.T) {
	fg := &guardtest.Forced{}
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{fg}}})
	env := startServer(t, &testService{}, false, s.ServerOptions())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
			t.Fatalf("EmptyCall() = %v", err)
		}
		stream, err := env.client.FullDuplexCall(ctx)
		if err == nil {
			err = stream.CloseSend()
		}
		if err == nil {
			_, err = stream.Recv()
		}
		if !errors.Is(err, io.EOF) {
			t.Fatalf("FullDuplexCall: %v, want EOF", err)
		}
	}
	guardtest.CheckKinds(t, fg,
		[]string{emptyCall + " unknown", duplexCall + " unknown", emptyCall + " unary", duplexCall + " stream"},
		[]string{emptyCall + " unary", duplexCall + " stream", emptyCall + " unary", duplexCall + " stream"})
}

// noStream is the grpc.ServerStream of a stream whose handler sends and
// receives nothing.
type noStream struct{ grpc.ServerStream }

func (noStream) Context() context.Context { return context.Background() }

// TestUnknownServiceNamesAreNotRemembered: a name that reaches the stream
// interceptor through a handler for unknown services
// (grpc.UnknownServiceHandler, which grpc-go calls with no service: srv
// nil) is not remembered as a stream, and takes none of methodkind.Max's places;
// a registered stream's method is.
func TestUnknownServiceNamesAreNotRemembered(t *testing.T) {
	s := mustServer(t, []decide.Rule{{Methods: []string{emptyCall}, Guards: []admission.Guard{&guardtest.Forced{}}}})
	in := s.StreamServerInterceptor()
	handler := func(any, grpc.ServerStream) error { return nil }
	for i := range 2 * methodkind.Max {
		info := &grpc.StreamServerInfo{FullMethod: fmt.Sprintf("/junk.Svc/M%d", i), IsClientStream: true, IsServerStream: true}
		if err := in(nil, noStream{}, info, handler); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	if n := s.streams.kinds.Len(); n != 0 {
		t.Errorf("%d names remembered after %d calls for unknown services, want 0", n, 2*methodkind.Max)
	}
	info := &grpc.StreamServerInfo{FullMethod: duplexCall, IsClientStream: true, IsServerStream: true}
	if err := in(&testService{}, noStream{}, info, handler); err != nil {
		t.Fatal(err)
	}
	if k := s.streams.kinds.Of(duplexCall); k != decide.BidiStream {
		t.Errorf("kinds.Of(%s) = %v after a stream of a registered service, want %v", duplexCall, k, decide.BidiStream)
	}
}
