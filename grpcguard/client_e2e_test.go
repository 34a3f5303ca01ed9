package grpcguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/clock/clocktest"
	"github.com/levee-go/levee/ratelimit"
)

const (
	cliEmptyCall       = "/grpc.testing.TestService/EmptyCall"
	cliStreamingOutput = "/grpc.testing.TestService/StreamingOutputCall"
)

// cliService is the downstream of the client tests. It counts the calls
// and streams that reach it, and fails them as its plan says.
type cliService struct {
	testgrpc.UnimplementedTestServiceServer
	calls   atomic.Int64 // unary calls that reached a handler
	streams atomic.Int64 // streams that reached a handler

	mu       sync.Mutex
	fail     func(n int64) bool // which call (1-based, unary and streams counted apart) fails; nil: none
	code     codes.Code         // status of a failure; Unavailable when zero
	pushback string             // trailer sent with a failure, if not ""
}

// plan sets which calls fail, with what code and pushback.
func (s *cliService) plan(fail func(n int64) bool, code codes.Code, pushback string) {
	s.mu.Lock()
	s.fail, s.code, s.pushback = fail, code, pushback
	s.mu.Unlock()
}

// outcome is the pushback trailer to send with call n, and its error.
func (s *cliService) outcome(n int64) (metadata.MD, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail == nil || !s.fail(n) {
		return nil, nil
	}
	code := s.code
	if code == codes.OK {
		code = codes.Unavailable
	}
	var md metadata.MD
	if s.pushback != "" {
		md = metadata.Pairs(PushbackTrailer, s.pushback)
	}
	return md, status.Error(code, "downstream failing")
}

func (s *cliService) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	md, err := s.outcome(s.calls.Add(1))
	if md != nil {
		_ = grpc.SetTrailer(ctx, md)
	}
	if err != nil {
		return nil, err
	}
	return &testgrpc.Empty{}, nil
}

func (s *cliService) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, ss testgrpc.TestService_StreamingOutputCallServer) error {
	md, err := s.outcome(s.streams.Add(1))
	for range 2 {
		if err := ss.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	if md != nil {
		ss.SetTrailer(md)
	}
	return err
}

func (s *cliService) StreamingInputCall(ss testgrpc.TestService_StreamingInputCallServer) error {
	_, err := s.outcome(s.streams.Add(1))
	for {
		if _, rerr := ss.Recv(); rerr == io.EOF {
			break
		} else if rerr != nil {
			return rerr
		}
	}
	if err != nil {
		return err
	}
	return ss.SendAndClose(&testgrpc.StreamingInputCallResponse{})
}

func (s *cliService) FullDuplexCall(ss testgrpc.TestService_FullDuplexCallServer) error {
	md, err := s.outcome(s.streams.Add(1))
	for {
		if _, rerr := ss.Recv(); rerr == io.EOF {
			break
		} else if rerr != nil {
			return rerr
		}
		if serr := ss.Send(&testgrpc.StreamingOutputCallResponse{}); serr != nil {
			return serr
		}
	}
	if md != nil {
		ss.SetTrailer(md)
	}
	return err
}

// serveCli serves svc on bufconn behind sopts and returns a client
// connection through dopts (the Client's DialOptions, say).
func serveCli(t testing.TB, svc *cliService, sopts []grpc.ServerOption, dopts ...grpc.DialOption) (testgrpc.TestServiceClient, *grpc.ClientConn) {
	t.Helper()
	gs := grpc.NewServer(sopts...)
	testgrpc.RegisterTestServiceServer(gs, svc)
	lis := bufconn.Listen(1 << 20)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	dopts = append(dopts,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	cc, err := grpc.NewClient("passthrough:///downstream", dopts...)
	if err != nil {
		t.Fatalf("grpc.NewClient() = %v", err)
	}
	t.Cleanup(func() {
		cc.Close()
		gs.Stop()
		<-served
	})
	return testgrpc.NewTestServiceClient(cc), cc
}

// transitions records a breaker's state changes.
type transitions struct {
	mu  sync.Mutex
	got []string
}

func (tr *transitions) record(from, to breaker.State) {
	tr.mu.Lock()
	tr.got = append(tr.got, from.String()+"→"+to.String())
	tr.mu.Unlock()
}

func (tr *transitions) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return fmt.Sprint(tr.got)
}

func wantLocalRefusal(t *testing.T, what string, err error, cause error) {
	t.Helper()
	if status.Code(err) != codes.Unavailable || !errors.Is(err, ErrClientRefused) || (cause != nil && !errors.Is(err, cause)) {
		t.Fatalf("%s = %v, want a local UNAVAILABLE refusal matching %v", what, err, cause)
	}
}

// TestClientBreakerOverGRPC: a server that fails X% of calls trips the
// client's breaker at the minimum number of calls when X reaches the
// threshold; while it is open no call reaches the server; after the wait
// the breaker probes, reopens while the server still fails, and closes
// through half-open once it has recovered.
func TestClientBreakerOverGRPC(t *testing.T) {
	tests := []struct {
		name     string
		failPct  int64
		wantTrip bool
	}{
		{"30% failures stay closed", 30, false},
		{"40% failures stay closed", 40, false},
		{"50% failures trip at the threshold", 50, true},
		{"60% failures trip", 60, true},
		{"100% failures trip", 100, true},
	}
	const (
		window = 10
		wait   = 5 * time.Second
		probes = 3
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New(time.Now())
			tr := &transitions{}
			c := mustClient(t, clk, WithThrottle(nil), WithBreaker(func(string, string) []breaker.Option {
				// The classic state machine, without the Client's trickle of
				// probes while open (TestClientOpenProbes tests that).
				return []breaker.Option{breaker.WithCountWindow(window), breaker.WithMinimumCalls(window),
					breaker.WithFailureRate(50), breaker.WithWaitInOpen(wait), breaker.WithHalfOpenCalls(probes),
					breaker.WithOpenProbes(0), breaker.WithOnStateChange(tr.record)}
			}))
			svc := &cliService{}
			svc.plan(func(n int64) bool { return (n-1)%10 < tt.failPct/10 }, codes.Unavailable, "")
			client, cc := serveCli(t, svc, nil, c.DialOptions()...)
			ctx := context.Background()
			call := func() error {
				_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
				return err
			}

			var failures int64
			for i := range window {
				err := call()
				if errors.Is(err, ErrClientRefused) {
					t.Fatalf("call %d = %v, want it sent: the breaker must not trip below the minimum", i+1, err)
				}
				if err != nil {
					failures++
				}
			}
			if failures != tt.failPct/10 {
				t.Fatalf("server failed %d of %d calls, want %d", failures, window, tt.failPct/10)
			}
			b := c.Breaker(cc.Target(), cliEmptyCall)
			for i := range 20 {
				err := call()
				if !tt.wantTrip {
					if errors.Is(err, ErrClientRefused) {
						t.Fatalf("call %d with %d%% failures = %v, want it sent", window+i+1, tt.failPct, err)
					}
					continue
				}
				wantLocalRefusal(t, fmt.Sprintf("call %d after the trip", window+i+1), err, breaker.ErrOpen)
			}
			if !tt.wantTrip {
				if got := svc.calls.Load(); got != window+20 {
					t.Errorf("server saw %d calls, want %d", got, window+20)
				}
				if st := b.StateAt(clk.Now()); st != breaker.StateClosed {
					t.Errorf("state = %v, want closed", st)
				}
				return
			}
			if got := svc.calls.Load(); got != window {
				t.Fatalf("server saw %d calls, want %d: calls refused locally must never reach it", got, window)
			}

			// Still failing after the wait: the probes reopen the breaker.
			svc.plan(func(int64) bool { return true }, codes.Unavailable, "")
			clk.Advance(wait)
			for i := range probes {
				if err := call(); status.Code(err) != codes.Unavailable || errors.Is(err, ErrClientRefused) {
					t.Fatalf("probe %d = %v, want the server's UNAVAILABLE", i+1, err)
				}
			}
			if st := b.StateAt(clk.Now()); st != breaker.StateOpen {
				t.Fatalf("state after failed probes = %v, want open", st)
			}
			wantLocalRefusal(t, "call after failed probes", call(), breaker.ErrOpen)

			// Recovered: the probes close it and calls flow again.
			svc.plan(nil, codes.OK, "")
			clk.Advance(wait)
			for i := range probes {
				if err := call(); err != nil {
					t.Fatalf("probe %d after recovery = %v, want nil", i+1, err)
				}
			}
			if st := b.StateAt(clk.Now()); st != breaker.StateClosed {
				t.Fatalf("state after successful probes = %v, want closed", st)
			}
			before := svc.calls.Load()
			for i := range 5 {
				if err := call(); err != nil {
					t.Fatalf("call %d after recovery = %v, want nil", i+1, err)
				}
			}
			if got := svc.calls.Load() - before; got != 5 {
				t.Errorf("server saw %d of 5 calls after recovery, want 5", got)
			}
			want := "[closed→open open→half-open half-open→open open→half-open half-open→closed]"
			if got := tr.String(); got != want {
				t.Errorf("state changes = %s, want %s", got, want)
			}
			if want, got := int64(window+2*probes+5), svc.calls.Load(); got != want {
				t.Errorf("server saw %d calls in all, want %d", got, want)
			}
		})
	}
}

// TestClientPushbackOverGRPC: a server refusal with a retry delay holds
// the target off for that delay; the calls refused meanwhile never reach
// the server.
func TestClientPushbackOverGRPC(t *testing.T) {
	t.Run("pushback trailer", func(t *testing.T) {
		clk := clocktest.New(time.Now())
		c := mustClient(t, clk, WithThrottle(nil)) // one refusal in one call would make it drop half
		svc := &cliService{}
		svc.plan(func(n int64) bool { return n == 1 }, codes.ResourceExhausted, "1500")
		client, cc := serveCli(t, svc, nil, c.DialOptions()...)
		ctx := context.Background()
		if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("first call = %v, want the server's RESOURCE_EXHAUSTED", err)
		}
		if got := c.HoldOff(cc.Target()); got != 1500*time.Millisecond {
			t.Fatalf("HoldOff() = %v, want 1.5s", got)
		}
		clk.Advance(time.Second)
		for range 3 {
			_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
			wantLocalRefusal(t, "call 1s into the hold-off", err, nil)
			if d, ok := RetryDelay(err); !ok || d != 500*time.Millisecond {
				t.Errorf("RetryDelay(refusal) = %v, %v; want 500ms, true", d, ok)
			}
		}
		// A stream to the same target is held off too.
		_, err := client.FullDuplexCall(ctx)
		wantLocalRefusal(t, "stream 1s into the hold-off", err, nil)
		if got := svc.calls.Load() + svc.streams.Load(); got != 1 {
			t.Fatalf("server saw %d calls, want 1", got)
		}
		clk.Advance(500 * time.Millisecond)
		if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
			t.Fatalf("call after the hold-off = %v, want nil", err)
		}
		if got := svc.calls.Load(); got != 2 {
			t.Errorf("server saw %d calls, want 2", got)
		}
	})

	// A levee Server refusing in its tap sends RetryInfo only (the tap can
	// set no trailer); refusing in its interceptor, the trailer too.
	for _, tap := range []bool{true, false} {
		t.Run(fmt.Sprintf("levee server, tap %v", tap), func(t *testing.T) {
			clk := clocktest.New(time.Now())
			c := mustClient(t, clk, WithThrottle(nil), WithMaxHoldOff(10*time.Second))
			srv, err := New([]decide.Rule{{Methods: []string{cliEmptyCall},
				Guards: []admission.Guard{ratelimit.NewGuard("rate", mustLimiter(t, ratelimit.Every(time.Hour), 1))}}})
			if err != nil {
				t.Fatalf("New() = %v", err)
			}
			sopts := srv.ServerOptions()
			if !tap {
				sopts = []grpc.ServerOption{grpc.ChainUnaryInterceptor(srv.UnaryServerInterceptor())}
			}
			svc := &cliService{}
			client, cc := serveCli(t, svc, sopts, c.DialOptions()...)
			ctx := context.Background()
			if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
				t.Fatalf("first call = %v, want nil", err)
			}
			var trailer metadata.MD
			_, err = client.EmptyCall(ctx, &testgrpc.Empty{}, grpc.Trailer(&trailer))
			if status.Code(err) != codes.ResourceExhausted || errors.Is(err, ErrClientRefused) {
				t.Fatalf("second call = %v, want the server's RESOURCE_EXHAUSTED", err)
			}
			if got := len(trailer.Get(PushbackTrailer)) > 0; got == tap {
				t.Errorf("pushback trailer present = %v, want %v", got, !tap)
			}
			if got := c.HoldOff(cc.Target()); got != 10*time.Second {
				t.Fatalf("HoldOff() = %v, want 10s (the server's hour, capped)", got)
			}
			for range 5 {
				_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
				wantLocalRefusal(t, "call during the hold-off", err, nil)
			}
			refused := func() uint64 {
				for _, s := range srv.Stats() {
					if s.Guard == "rate" {
						return s.Refused
					}
				}
				return 0
			}
			if got := refused(); got != 1 {
				t.Errorf("server refused %d calls, want 1: the held-off calls never reach it", got)
			}
			if got := svc.calls.Load(); got != 1 {
				t.Errorf("server handled %d calls, want 1", got)
			}
			clk.Advance(10 * time.Second)
			if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); status.Code(err) != codes.ResourceExhausted || errors.Is(err, ErrClientRefused) {
				t.Fatalf("call after the hold-off = %v, want it sent and refused by the server", err)
			}
			if got := refused(); got != 2 {
				t.Errorf("server refused %d calls, want 2", got)
			}
		})
	}
}

// TestClientStreamsOverGRPC: streams are admitted once when they open and
// finished when they end.
func TestClientStreamsOverGRPC(t *testing.T) {
	ctx := context.Background()
	smallBreaker := func(window, probes int, tr *transitions) ClientOption {
		return WithBreaker(func(string, string) []breaker.Option {
			opts := []breaker.Option{breaker.WithCountWindow(window), breaker.WithMinimumCalls(window),
				breaker.WithWaitInOpen(time.Second), breaker.WithHalfOpenCalls(probes)}
			if tr != nil {
				opts = append(opts, breaker.WithOnStateChange(tr.record))
			}
			return opts
		})
	}
	const (
		outputCall = "/grpc.testing.TestService/StreamingOutputCall"
		inputCall  = "/grpc.testing.TestService/StreamingInputCall"
		duplexCall = "/grpc.testing.TestService/FullDuplexCall"
	)

	t.Run("failing server streams trip the breaker", func(t *testing.T) {
		clk := clocktest.New(time.Now())
		c := mustClient(t, clk, WithThrottle(nil), smallBreaker(4, 1, nil))
		svc := &cliService{}
		svc.plan(func(int64) bool { return true }, codes.Unavailable, "")
		client, _ := serveCli(t, svc, nil, c.DialOptions()...)
		for i := range 4 {
			st, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
			if err != nil {
				t.Fatalf("stream %d: open = %v", i+1, err)
			}
			var n int
			for {
				if _, err = st.Recv(); err != nil {
					break
				}
				n++
			}
			if n != 2 || status.Code(err) != codes.Unavailable {
				t.Fatalf("stream %d: %d messages then %v, want 2 then UNAVAILABLE", i+1, n, err)
			}
		}
		_, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
		wantLocalRefusal(t, "stream after 4 failed streams", err, breaker.ErrOpen)
		if got := svc.streams.Load(); got != 4 {
			t.Errorf("server saw %d streams, want 4", got)
		}
	})

	t.Run("streams ending with an application error do not trip it", func(t *testing.T) {
		c := mustClient(t, clocktest.New(time.Now()), WithThrottle(nil), smallBreaker(4, 1, nil))
		svc := &cliService{}
		svc.plan(func(int64) bool { return true }, codes.Internal, "")
		client, cc := serveCli(t, svc, nil, c.DialOptions()...)
		for i := range 5 {
			st, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
			if err != nil {
				t.Fatalf("stream %d: open = %v, want opened", i+1, err)
			}
			for err == nil {
				_, err = st.Recv()
			}
			if status.Code(err) != codes.Internal {
				t.Fatalf("stream %d ended with %v, want the server's INTERNAL", i+1, err)
			}
		}
		if s := c.Breaker(cc.Target(), outputCall).Snapshot(); s.Successes != 5 || s.Failures != 0 {
			t.Errorf("breaker after 5 INTERNAL streams: %d successes, %d failures; want 5, 0", s.Successes, s.Failures)
		}
	})

	t.Run("streams read to the end are successes", func(t *testing.T) {
		c := mustClient(t, clocktest.New(time.Now()), WithThrottle(nil))
		svc := &cliService{}
		client, cc := serveCli(t, svc, nil, c.DialOptions()...)
		bidi, err := client.FullDuplexCall(ctx)
		if err != nil {
			t.Fatalf("FullDuplexCall() = %v", err)
		}
		for range 3 {
			if err := bidi.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
				t.Fatalf("Send() = %v", err)
			}
			if _, err := bidi.Recv(); err != nil {
				t.Fatalf("Recv() = %v", err)
			}
		}
		b := c.Breaker(cc.Target(), duplexCall)
		if s := b.Snapshot(); s.Successes+s.Failures+s.Ignored != 0 {
			t.Fatalf("open stream recorded: %+v, want nothing until it ends", s)
		}
		_ = bidi.CloseSend()
		if _, err := bidi.Recv(); err != io.EOF {
			t.Fatalf("last Recv() = %v, want io.EOF", err)
		}
		if s := b.Snapshot(); s.Successes != 1 || s.Failures != 0 {
			t.Errorf("after io.EOF: %d successes, %d failures; want 1, 0", s.Successes, s.Failures)
		}

		in, err := client.StreamingInputCall(ctx)
		if err != nil {
			t.Fatalf("StreamingInputCall() = %v", err)
		}
		for range 2 {
			if err := in.Send(&testgrpc.StreamingInputCallRequest{}); err != nil {
				t.Fatalf("Send() = %v", err)
			}
		}
		if _, err := in.CloseAndRecv(); err != nil {
			t.Fatalf("CloseAndRecv() = %v", err)
		}
		if s := c.Breaker(cc.Target(), inputCall).Snapshot(); s.Successes != 1 {
			t.Errorf("client stream after CloseAndRecv: %d successes, want 1", s.Successes)
		}
	})

	t.Run("a half-open probe stream holds its permit for its life", func(t *testing.T) {
		clk := clocktest.New(time.Now())
		tr := &transitions{}
		c := mustClient(t, clk, WithThrottle(nil), smallBreaker(1, 1, tr))
		svc := &cliService{}
		svc.plan(func(n int64) bool { return n == 1 }, codes.Unavailable, "")
		client, _ := serveCli(t, svc, nil, c.DialOptions()...)
		first, err := client.FullDuplexCall(ctx)
		if err != nil {
			t.Fatalf("FullDuplexCall() = %v", err)
		}
		_ = first.CloseSend()
		if _, err := first.Recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("first stream ended with %v, want UNAVAILABLE", err)
		}
		clk.Advance(time.Second)
		probe, err := client.FullDuplexCall(ctx)
		if err != nil {
			t.Fatalf("probe stream: open = %v", err)
		}
		_, err = client.FullDuplexCall(ctx)
		wantLocalRefusal(t, "second stream while the probe runs", err, breaker.ErrTooManyCalls)
		if err := probe.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
			t.Fatalf("probe Send() = %v", err)
		}
		if _, err := probe.Recv(); err != nil {
			t.Fatalf("probe Recv() = %v", err)
		}
		_ = probe.CloseSend()
		if _, err := probe.Recv(); err != io.EOF {
			t.Fatalf("probe ended with %v, want io.EOF", err)
		}
		if want := "[closed→open open→half-open half-open→closed]"; tr.String() != want {
			t.Errorf("state changes = %s, want %s", tr, want)
		}
		if got := svc.streams.Load(); got != 2 {
			t.Errorf("server saw %d streams, want 2", got)
		}
	})

	t.Run("a canceled stream is ignored and gives its probe back", func(t *testing.T) {
		clk := clocktest.New(time.Now())
		c := mustClient(t, clk, WithThrottle(nil), smallBreaker(1, 1, nil))
		svc := &cliService{}
		client, cc := serveCli(t, svc, nil, c.DialOptions()...)
		sctx, cancel := context.WithCancel(ctx)
		st, err := client.FullDuplexCall(sctx)
		if err != nil {
			t.Fatalf("FullDuplexCall() = %v", err)
		}
		if err := st.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
			t.Fatalf("Send() = %v", err)
		}
		cancel() // abandoned: never read to the end
		b := c.Breaker(cc.Target(), duplexCall)
		cliWaitFor(t, "the canceled stream to be finished", func() bool { return b.Snapshot().Ignored == 1 })
		if s := b.Snapshot(); s.Successes+s.Failures != 0 {
			t.Errorf("canceled stream recorded as %+v, want ignored only", s)
		}
	})

	t.Run("a stream's pushback holds the target off", func(t *testing.T) {
		clk := clocktest.New(time.Now())
		c := mustClient(t, clk, WithThrottle(nil))
		svc := &cliService{}
		svc.plan(func(int64) bool { return true }, codes.ResourceExhausted, "2000")
		client, cc := serveCli(t, svc, nil, c.DialOptions()...)
		st, err := client.FullDuplexCall(ctx)
		if err != nil {
			t.Fatalf("FullDuplexCall() = %v", err)
		}
		_ = st.CloseSend()
		if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("stream ended with %v, want RESOURCE_EXHAUSTED", err)
		}
		if got := c.HoldOff(cc.Target()); got != 2*time.Second {
			t.Fatalf("HoldOff() = %v, want 2s", got)
		}
		_, err = client.EmptyCall(ctx, &testgrpc.Empty{})
		wantLocalRefusal(t, "unary call during the stream's hold-off", err, nil)
	})
}

// cliWaitFor polls cond until it holds, for conditions that another
// goroutine makes true (a context's AfterFunc); it fails after 10s.
func cliWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestClientConcurrentOverGRPC: many callers through one Client against a
// server failing some calls. Every call is either sent (and counted by the
// server) or refused locally, and every sent call is recorded exactly once
// by the breaker and the throttle.
func TestClientConcurrentOverGRPC(t *testing.T) {
	var ticks atomic.Int64
	start := time.Now()
	count := &countingGuard{}
	c := mustClient(t, nil, WithBreaker(func(string, string) []breaker.Option {
		return []breaker.Option{breaker.WithCountWindow(20), breaker.WithMinimumCalls(20),
			breaker.WithWaitInOpen(50 * time.Millisecond), breaker.WithHalfOpenCalls(4)}
	}), WithClientGuards(func(string, string) []admission.Guard { return []admission.Guard{count} }))
	// Time moves 1ms per clock reading, so the breaker opens and half-opens
	// many times during the run, whatever the machine's speed.
	c.clock.Fake = func() time.Time { return start.Add(time.Duration(ticks.Add(1)) * time.Millisecond) }
	svc := &cliService{}
	svc.plan(func(n int64) bool { return n%4 != 0 && (n/200)%2 == 1 }, codes.Unavailable, "")
	client, cc := serveCli(t, svc, nil, c.DialOptions()...)

	const callers, each = 16, 100
	var sent, local, other atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				var err error
				if (g+i)%5 == 0 {
					var st testgrpc.TestService_FullDuplexCallClient
					if st, err = client.FullDuplexCall(context.Background()); err == nil {
						_ = st.CloseSend()
						_, err = st.Recv()
						if err == io.EOF {
							err = nil
						}
					}
				} else {
					_, err = client.EmptyCall(context.Background(), &testgrpc.Empty{})
				}
				switch {
				case errors.Is(err, ErrClientRefused):
					local.Add(1)
					if status.Code(err) != codes.Unavailable {
						other.Add(1)
					}
				case err == nil || status.Code(err) == codes.Unavailable:
					sent.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := other.Load(); n != 0 {
		t.Fatalf("%d calls ended with an unexpected error", n)
	}
	reached := svc.calls.Load() + svc.streams.Load()
	if sent.Load() != reached || sent.Load()+local.Load() != callers*each {
		t.Fatalf("sent %d, refused locally %d, server saw %d; want sent == seen and sent + refused == %d",
			sent.Load(), local.Load(), reached, callers*each)
	}
	t.Logf("%d calls: %d sent, %d refused locally", callers*each, sent.Load(), local.Load())
	if local.Load() == 0 {
		t.Errorf("no call was refused locally, want the breaker to have opened")
	}
	// The custom guard runs last: every call it admits is sent.
	if a, f, sk := count.admitted.Load(), count.finished.Load(), count.skipped.Load(); a != reached || f != reached || sk != 0 {
		t.Errorf("last guard admitted %d, finished %d, skipped %d calls; want %d, %d, 0 (each sent call finished once)", a, f, sk, reached, reached)
	}
	var requests int64
	for _, m := range []string{cliEmptyCall, "/grpc.testing.TestService/FullDuplexCall"} {
		requests += c.Throttle(cc.Target(), m).SnapshotAt(start.Add(time.Duration(ticks.Load()) * time.Millisecond)).Requests
	}
	if requests != reached {
		t.Errorf("throttles counted %d requests, want %d (one per sent call)", requests, reached)
	}
}

// countingGuard admits every call and counts what happens to them.
type countingGuard struct {
	admitted, finished, skipped atomic.Int64
}

func (g *countingGuard) Name() string { return "count" }
func (g *countingGuard) Admit(admission.Call) admission.Decision {
	g.admitted.Add(1)
	return admission.Decision{}
}
func (g *countingGuard) Finish(_ admission.Call, _ admission.Permit, o admission.Outcome) {
	if o.Skipped {
		g.skipped.Add(1)
		return
	}
	g.finished.Add(1)
}

// appErrService answers EmptyCall with its plan's error for call n (a
// handler's plain Go error reaches the client as UNKNOWN), and UnaryCall
// always with UNAVAILABLE, as an overloaded server does.
type appErrService struct {
	testgrpc.UnimplementedTestServiceServer
	calls, unary atomic.Int64
	plan         func(n int64) error
}

func (s *appErrService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	if err := s.plan(s.calls.Add(1)); err != nil {
		return nil, err
	}
	return &testgrpc.Empty{}, nil
}

func (s *appErrService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.unary.Add(1)
	return nil, status.Error(codes.Unavailable, "overloaded")
}

// TestClientApplicationErrorsOverGRPC: with the default breaker and
// throttle, the backend's application errors never make the client refuse
// a call. The sequence of issue 21 — one success, two plain Go errors
// (UNKNOWN), after which the throttle used to drop one call in four —
// then 300 calls two in three of which fail with UNKNOWN, INTERNAL or
// NOT_FOUND: every call is sent, the throttle counts every one as
// accepted, the breaker records no failure. Overload answers still count:
// 100 UNAVAILABLE answers (the breaker's and the throttle's minimum) open
// the breaker.
func TestClientApplicationErrorsOverGRPC(t *testing.T) {
	clk := clocktest.New(time.Now())
	c := mustClient(t, clk)
	svc := &appErrService{plan: func(n int64) error {
		switch {
		case n == 1:
			return nil
		case n <= 3:
			return errors.New("inventory: sku table: boom")
		}
		switch n % 4 {
		case 0:
			return errors.New("inventory: sku table: boom")
		case 1:
			return status.Error(codes.Internal, "inventory: nil map")
		case 2:
			return status.Error(codes.NotFound, "inventory: unknown sku")
		}
		return nil
	}}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, svc)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	cc, err := grpc.NewClient("passthrough:///downstream", append(c.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))...)
	if err != nil {
		t.Fatalf("grpc.NewClient() = %v", err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)
	ctx := context.Background()

	const calls = 303
	for i := 1; i <= calls; i++ {
		clk.Advance(time.Millisecond)
		_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
		if errors.Is(err, ErrClientRefused) {
			t.Fatalf("call %d refused by the client: %v; want every call sent", i, err)
		}
		if i == 2 && status.Code(err) != codes.Unknown {
			t.Fatalf("call 2 = %v, want UNKNOWN (a handler's plain Go error)", err)
		}
	}
	if got := svc.calls.Load(); got != calls {
		t.Errorf("server saw %d calls, want %d", got, calls)
	}
	if s := c.Throttle(cc.Target(), cliEmptyCall).SnapshotAt(clk.Now()); s.Requests != calls || s.Accepts != calls || s.Throttled != 0 {
		t.Errorf("throttle: %d requests, %d accepts, %d dropped; want %d, %d, 0", s.Requests, s.Accepts, s.Throttled, calls, calls)
	}
	brk := c.Breaker(cc.Target(), cliEmptyCall)
	if s := brk.Snapshot(); s.Failures != 0 || s.State != breaker.StateClosed {
		t.Errorf("breaker: %d failures, %v; want 0, closed", s.Failures, s.State)
	}

	const unaryCall = "/grpc.testing.TestService/UnaryCall"
	for i := 1; i <= 110; i++ {
		clk.Advance(time.Millisecond)
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if i <= 100 {
			if status.Code(err) != codes.Unavailable || errors.Is(err, ErrClientRefused) {
				t.Fatalf("overload call %d = %v, want the server's UNAVAILABLE", i, err)
			}
			continue
		}
		wantLocalRefusal(t, fmt.Sprintf("overload call %d, after 100 UNAVAILABLE", i), err, breaker.ErrOpen)
	}
	if got := svc.unary.Load(); got != 100 {
		t.Errorf("server saw %d overloaded calls, want 100", got)
	}
	if p := c.Throttle(cc.Target(), unaryCall).ProbabilityAt(clk.Now()); p < 0.99 {
		t.Errorf("throttle P after 100 UNAVAILABLE = %v, want 100/101", p)
	}
}
