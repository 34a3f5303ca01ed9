package grpcguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

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
	var held []netip.Addr
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

// TestStreamCapPerPeerLeavesUnixSocketClientsUncapped: the cap per
// client counts clients by IP address (WithStreamLimits); a client on a
// Unix socket has none, so it has no cap of its own, as connlimit leaves
// it, and its streams count toward the Server's cap only. Before, every
// such client counted as one client, "" (decide.PeerHost of a Unix
// address): every client of a server behind a Unix socket (a sidecar
// proxy, a local agent) shared one cap per client, 2,500 by default, and
// was refused without evidence of overload. Here each of two client
// connections opens one stream under a cap of 1 per client, and a third
// stream finds the Server's cap of 2 full.
func TestStreamCapPerPeerLeavesUnixSocketClientsUncapped(t *testing.T) {
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{&guardtest.Forced{}}}}, WithStreamLimits(2, 1))
	gs := grpc.NewServer(s.ServerOptions()...)
	testgrpc.RegisterTestServiceServer(gs, &testService{})
	sock := filepath.Join(t.TempDir(), "s.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("no unix sockets: %v", err)
	}
	go gs.Serve(lis)
	defer gs.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var clients []testgrpc.TestServiceClient
	for range 2 {
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		clients = append(clients, testgrpc.NewTestServiceClient(conn))
	}
	for i, c := range clients {
		if err := openStream(ctx, c); err != nil {
			t.Errorf("stream of Unix-socket client %d: %v (%v); want admitted: a client without an IP address has no cap of its own", i, status.Code(err), err)
		}
	}
	if st := s.StreamStats(); st.Open != 2 || st.Peers != 0 {
		t.Errorf("StreamStats() = %+v, want 2 open, no client by IP address", st)
	}
	if err := openStream(ctx, clients[0]); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("third stream with the Server's cap of 2 full: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// openStream opens a bidi stream on client and waits for one echo, so
// that the stream is open in its handler; it returns the first error.
func openStream(ctx context.Context, client testgrpc.TestServiceClient) error {
	stream, err := client.FullDuplexCall(ctx)
	if err == nil {
		err = stream.Send(&testgrpc.StreamingOutputCallRequest{})
	}
	if err == nil {
		_, err = stream.Recv()
	}
	return err
}

// TestHealthStreamsAreNotCapped: the standard health service's streams
// are neither counted nor capped (WithStreamLimits): a client's health
// checking holds a Watch open on each connection, and grpc-go's client
// takes a refused Watch for an unhealthy server and sends it no call.
// Before, with the caps full, a client's Watch was refused; protect's
// doc said health checks are never guarded.
func TestHealthStreamsAreNotCapped(t *testing.T) {
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{&guardtest.Forced{}}}}, WithStreamLimits(1, 1))
	env := startServer(t, &testService{}, true, s.ServerOptions())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := openStream(ctx, env.client); err != nil { // fills both caps
		t.Fatal(err)
	}
	for i := range 2 {
		watch, err := env.health.Watch(ctx, &healthpb.HealthCheckRequest{})
		var resp *healthpb.HealthCheckResponse
		if err == nil {
			resp, err = watch.Recv()
		}
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health Watch %d with the stream caps full: %v, %v; want SERVING", i, resp, err)
		}
	}
	if st := s.StreamStats(); st.Open != 1 || st.Refused != 0 {
		t.Errorf("StreamStats() = %+v, want the one stream open, none refused (health Watches not counted)", st)
	}
	other, err := env.client.FullDuplexCall(ctx)
	if err == nil {
		_, err = other.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("another stream with the caps full: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// TestStreamCapCodeOfUnguardedMethod: a stream beyond the caps on a
// method no rule guards (an exempt one) is refused with WithStreamCode's
// code, as a guarded method's is with its rule's. Before, it was always
// RESOURCE_EXHAUSTED, and protect.WithCode did not reach it.
func TestStreamCapCodeOfUnguardedMethod(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
		want codes.Code
	}{
		{"default", nil, codes.ResourceExhausted},
		{"UNAVAILABLE", []Option{WithStreamCode(decide.Unavailable)}, codes.Unavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := append([]Option{WithExempt(duplexCall), WithStreamLimits(1, 0)}, tt.opts...)
			s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{&guardtest.Forced{}}}}, opts...)
			env := startServer(t, &testService{}, false, s.ServerOptions())
			got, err := secondStream(t, env)
			if got.code != tt.want || got.info.GetMetadata()["guard"] != StreamGuardName {
				t.Errorf("second stream of an exempt method beyond the cap of 1: %v, want %v by %q", err, tt.want, StreamGuardName)
			}
		})
	}
}

func TestNewRejectsBadStreamOptions(t *testing.T) {
	e := guardtest.Engine(t, decide.Rule{Guards: []admission.Guard{&guardtest.Forced{}}})
	opts := []Option{WithStreamLimits(-1, 2), WithStreamCode(decide.Code(5))}
	want := []string{
		"grpcguard: WithStreamLimits: want caps >= 0, got max -1, perPeer 2",
		"grpcguard: WithStreamCode: want RESOURCE_EXHAUSTED or UNAVAILABLE, got NOT_FOUND",
	}
	for name, build := range map[string]func() (*Server, error){
		"New":       func() (*Server, error) { return New(nil, opts...) },
		"ForEngine": func() (*Server, error) { return ForEngine(e, opts...) },
	} {
		s, err := build()
		if s != nil || err == nil {
			t.Fatalf("%s(%v) = %v, %v; want nil and an error", name, opts, s, err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s() error %q does not contain %q", name, err, w)
			}
		}
	}
}
