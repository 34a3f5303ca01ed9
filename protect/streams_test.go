package protect_test

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/protect"
)

const fullDuplex = "/grpc.testing.TestService/FullDuplexCall"

// streamService answers unary calls at once, holds each bidi stream
// open, echoing what it receives, until the client closes it, and holds
// each server stream open after its first message, as a watch does,
// until the client leaves.
type streamService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (streamService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

func (s streamService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: req.Payload}); err != nil {
			return err
		}
	}
}

func (streamService) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	if err := stream.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

// serveStreams starts a protected server with svc on loopback.
func serveStreams(t *testing.T, svc testgrpc.TestServiceServer, opts ...protect.Option) (*protect.Server, string) {
	t.Helper()
	p, err := protect.New(append([]protect.Option{protect.WithoutCPU()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(p.ServerOptions()...)
	testgrpc.RegisterTestServiceServer(gs, svc)
	go gs.Serve(lis)
	t.Cleanup(func() {
		gs.Stop()
		p.Stop()
	})
	return p, lis.Addr().String()
}

// dialFrom connects to addr from the loopback address local (":0" port).
func dialFrom(t *testing.T, addr, local string) testgrpc.TestServiceClient {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}

// openStreams opens n bidi streams, each confirmed open by one echo.
func openStreams(t *testing.T, ctx context.Context, client testgrpc.TestServiceClient, n int) []testgrpc.TestService_FullDuplexCallClient {
	t.Helper()
	var out []testgrpc.TestService_FullDuplexCallClient
	for i := range n {
		s, err := client.FullDuplexCall(ctx)
		if err != nil {
			t.Fatalf("stream %d: FullDuplexCall: %v", i, err)
		}
		if err := s.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
			t.Fatalf("stream %d: Send: %v", i, err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatalf("stream %d: Recv: %v", i, err)
		}
		out = append(out, s)
	}
	return out
}

// unaryCallsSucceed makes n unary calls one after the other, each with 2s
// to succeed; what says what the server has open meanwhile.
func unaryCallsSucceed(t *testing.T, ctx context.Context, client testgrpc.TestServiceClient, n int, what string) {
	t.Helper()
	for i := range n {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := client.EmptyCall(cctx, &testgrpc.Empty{})
		cancel()
		if err != nil {
			t.Fatalf("unary call %d %s: %v", i, what, err)
		}
	}
}

// noneRefused fails t if a guard of p refused a call.
func noneRefused(t *testing.T, p *protect.Server) {
	t.Helper()
	for _, st := range p.Guard().Stats() {
		if st.Refused > 0 {
			t.Errorf("guard %s of rule %s refused %d calls, want none", st.Guard, st.Rule, st.Refused)
		}
	}
}

// TestIdleStreamsHoldNoTurn: with 1000 idle bidi streams open, unary
// calls are neither refused nor kept waiting for a turn, and the run limit
// holds no turn for a stream.
func TestIdleStreamsHoldNoTurn(t *testing.T) {
	p, addr := serveStreams(t, streamService{})
	client := dialFrom(t, addr, "127.0.0.1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streams := openStreams(t, ctx, client, 1000)
	if got := p.Guard().StreamStats().Open; got != 1000 {
		t.Errorf("StreamStats().Open = %d with 1000 streams open, want 1000", got)
	}
	if r := p.RunLimit().Running(); r != 0 {
		t.Errorf("RunLimit().Running() = %d with 1000 idle streams and no unary call, want 0", r)
	}
	unaryCallsSucceed(t, ctx, client, 200, "with 1000 idle streams open")
	if w := p.RunLimit().Waiting(); w != 0 {
		t.Errorf("RunLimit().Waiting() = %d, want 0", w)
	}
	noneRefused(t, p)
	for _, s := range streams {
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("stream end: %v, want EOF", err)
		}
	}
	waitFor(t, func() bool { return p.Guard().StreamStats().Open == 0 }, "every stream closed")
}

// TestIdleServerStreamsHoldNoTurn: with 1000 server streams open and
// idle, as watches are, unary calls are neither refused nor kept
// waiting, and the run limit holds no turn for them once their hold ran
// out.
func TestIdleServerStreamsHoldNoTurn(t *testing.T) {
	p, addr := serveStreams(t, streamService{})
	client := dialFrom(t, addr, "127.0.0.1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 1000 {
		s, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		if err != nil {
			t.Fatalf("server stream %d: %v", i, err)
		}
	}
	waitFor(t, func() bool { return p.RunLimit().Running() == 0 }, "no turn held by the open streams")
	unaryCallsSucceed(t, ctx, client, 200, "with 1000 idle server streams open")
	if w := p.RunLimit().Waiting(); w != 0 {
		t.Errorf("RunLimit().Waiting() = %d, want 0", w)
	}
	noneRefused(t, p)
	cancel()
	waitFor(t, func() bool { return p.Guard().StreamStats().Open == 0 }, "every stream closed")
}

// TestABurstOfServerStreamsIsNoSpike: 1000 server streams opened at once,
// as watches are when clients reconnect, are all served, and unary calls
// after them are neither refused nor kept waiting: a stream's open says
// nothing of the rate of work, so it never counts toward a spike.
func TestABurstOfServerStreamsIsNoSpike(t *testing.T) {
	p, addr := serveStreams(t, streamService{})
	client := dialFrom(t, addr, "127.0.0.1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 1000)
	var wg sync.WaitGroup
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
			if err == nil {
				_, err = s.Recv()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	var first error
	for err := range errs {
		if err != nil {
			if first == nil {
				first = err
			}
			failed++
		}
	}
	if failed > 0 {
		t.Fatalf("%d of 1000 server streams opened at once failed, want none; the first: %v", failed, first)
	}
	unaryCallsSucceed(t, ctx, client, 200, "after 1000 server streams opened at once")
	noneRefused(t, p)
	cancel()
	waitFor(t, func() bool { return p.Guard().StreamStats().Open == 0 }, "every stream closed")
}

// TestStreamLifetimeIsNotAServiceTime: a stream open for half a second
// teaches the deadline guard nothing, so a stream of the same method with
// a 150ms deadline, which needs well under a millisecond, is not refused.
func TestStreamLifetimeIsNotAServiceTime(t *testing.T) {
	p, addr := serveStreams(t, streamService{})
	client := dialFrom(t, addr, "127.0.0.1")
	ctx := context.Background()
	s := openStreams(t, ctx, client, 1)[0]
	time.Sleep(500 * time.Millisecond) // the stream's lifetime, not a wait for a result
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v, want EOF", err)
	}
	waitFor(t, func() bool { return p.Guard().StreamStats().Open == 0 }, "the stream closed")
	if st := p.Deadline().ServiceTime(fullDuplex); st != 0 {
		t.Errorf("Deadline().ServiceTime(%s) = %v after one stream of 500ms, want 0 (not learned)", fullDuplex, st)
	}
	for i := range 20 {
		cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		s2, err := client.FullDuplexCall(cctx)
		if err == nil {
			err = s2.Send(&testgrpc.StreamingOutputCallRequest{})
		}
		if err == nil {
			_, err = s2.Recv()
		}
		cancel()
		if err != nil {
			t.Fatalf("stream %d with a 150ms deadline after a long one: %v", i, err)
		}
	}
	for _, st := range p.Guard().Stats() {
		if st.Refused > 0 {
			t.Errorf("guard %s refused %d calls, want none", st.Guard, st.Refused)
		}
	}
}

// TestStreamCapPerPeer: a client holding its cap of streams open gets its
// next stream refused with RESOURCE_EXHAUSTED, while another client's
// streams and unary calls go on; goroutines stay bounded.
func TestStreamCapPerPeer(t *testing.T) {
	p, addr := serveStreams(t, streamService{}, protect.WithStreamLimits(100, 20))
	greedy := dialFrom(t, addr, "127.0.0.2")
	other := dialFrom(t, addr, "127.0.0.3")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	openStreams(t, ctx, greedy, 20)
	before := runtime.NumGoroutine()
	for i := range 50 {
		s, err := greedy.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Recv()
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), grpcguard.ReasonTooManyStreams) {
			t.Fatalf("greedy client's stream %d beyond its cap: %v, want RESOURCE_EXHAUSTED %q", 21+i, err, grpcguard.ReasonTooManyStreams)
		}
	}
	// A refused stream's goroutines end soon after its refusal; those of
	// the tests before may still be ending too. What must not happen is
	// goroutines that stay, so the count has 5s to come back.
	bounded := func() bool { return runtime.NumGoroutine() <= before+20 }
	for deadline := time.Now().Add(5 * time.Second); !bounded() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if after := runtime.NumGoroutine(); after > before+20 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines %d → %d 5s after 50 refused streams, want them bounded; they are:\n%s",
			before, after, buf[:runtime.Stack(buf, true)])
	}
	openStreams(t, ctx, other, 20) // another client's streams are not refused
	if _, err := other.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Errorf("other client's unary call: %v", err)
	}
	if _, err := greedy.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Errorf("greedy client's unary call: %v (the stream cap refuses streams only)", err)
	}
	if st := p.Guard().StreamStats(); st.Open != 40 || st.Peers != 2 || st.Refused != 50 {
		t.Errorf("StreamStats() = %+v, want 40 open, 2 peers, 50 refused", st)
	}
}

// TestStreamCapCodeOfExemptMethod: a stream beyond the cap is refused
// with the preset's code (WithStreamLimits), on a method no rule guards
// too: an exempt one (WithMethod{Exempt}), reflection. Before, grpcguard
// refused those with RESOURCE_EXHAUSTED whatever WithCode said.
func TestStreamCapCodeOfExemptMethod(t *testing.T) {
	_, addr := serveStreams(t, streamService{},
		protect.WithCode(decide.Unavailable),
		protect.WithStreamLimits(1, 0),
		protect.WithMethod(fullDuplex, protect.Method{Exempt: true}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := dialFrom(t, addr, "127.0.0.1")
	openStreams(t, ctx, client, 1)
	s, err := client.FullDuplexCall(ctx)
	if err == nil {
		if err = s.Send(&testgrpc.StreamingOutputCallRequest{}); err == nil {
			_, err = s.Recv()
		}
	}
	if got := status.Code(err); got != codes.Unavailable || !strings.Contains(err.Error(), grpcguard.ReasonTooManyStreams) {
		t.Errorf("stream beyond the cap on an exempt method: %v (%v), want UNAVAILABLE (WithCode) %q", got, err, grpcguard.ReasonTooManyStreams)
	}
}

// waitFor polls cond for up to 5s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestAbandonedStreamsLeaveNothing: a client that opens streams and
// abandons them at once, 2000 times, leaves no open stream, no turn and
// no goroutine behind, and another client's calls are not refused.
func TestAbandonedStreamsLeaveNothing(t *testing.T) {
	p, addr := serveStreams(t, streamService{}, protect.WithStreamLimits(200, 50))
	flood := dialFrom(t, addr, "127.0.0.2")
	other := dialFrom(t, addr, "127.0.0.3")
	if _, err := other.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for range 2000 {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := flood.FullDuplexCall(ctx)
		if err == nil {
			_ = s.Send(&testgrpc.StreamingOutputCallRequest{})
		}
		cancel()
	}
	for i := range 50 {
		if _, err := other.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
			t.Fatalf("other client's call %d during the flood's aftermath: %v", i, err)
		}
	}
	waitFor(t, func() bool { return p.Guard().StreamStats().Open == 0 }, "every abandoned stream closed")
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before+5 }, "goroutines back to where they were")
	if r, w := p.RunLimit().Running(), p.RunLimit().Waiting(); r != 0 || w != 0 {
		t.Errorf("run limit: %d running, %d waiting after the flood, want 0, 0", r, w)
	}
}
