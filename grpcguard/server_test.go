package grpcguard

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/ratelimit"
)

const (
	emptyCall  = "/grpc.testing.TestService/EmptyCall"
	unaryCall  = "/grpc.testing.TestService/UnaryCall"
	duplexCall = "/grpc.testing.TestService/FullDuplexCall"
)

// testService counts the calls that reach its handlers; EmptyCall blocks
// while block is open, so tests can hold bulkhead slots.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
	calls   atomic.Int64
	running atomic.Int64
	peak    atomic.Int64
	block   chan struct{}
	entered chan struct{} // receives once per EmptyCall that started
}

func (s *testService) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	s.calls.Add(1)
	n := s.running.Add(1)
	defer s.running.Add(-1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	if s.block != nil {
		select {
		case <-s.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &testgrpc.Empty{}, nil
}

func (s *testService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.calls.Add(1)
	return &testgrpc.SimpleResponse{}, nil
}

func (s *testService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	s.calls.Add(1)
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

type testEnv struct {
	client testgrpc.TestServiceClient
	health healthpb.HealthClient
	conn   *grpc.ClientConn
	svc    *testService
}

// startServer serves svc behind the given server options on bufconn (or
// on 127.0.0.1 when tcp is set) and returns a connected client.
func startServer(t testing.TB, svc *testService, tcp bool, sopts []grpc.ServerOption, dopts ...grpc.DialOption) *testEnv {
	t.Helper()
	gs := grpc.NewServer(sopts...)
	testgrpc.RegisterTestServiceServer(gs, svc)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	var lis net.Listener
	target := "passthrough:///bufnet"
	dopts = append(dopts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if tcp {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis, target = l, l.Addr().String()
	} else {
		bl := bufconn.Listen(1 << 20)
		lis = bl
		dopts = append(dopts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return bl.DialContext(ctx)
		}))
	}
	go gs.Serve(lis)
	conn, err := grpc.NewClient(target, dopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
	})
	return &testEnv{client: testgrpc.NewTestServiceClient(conn), health: healthpb.NewHealthClient(conn), conn: conn, svc: svc}
}

func mustServer(t testing.TB, rules []decide.Rule, opts ...Option) *Server {
	t.Helper()
	s, err := New(rules, opts...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return s
}

// interceptorsOnly installs a Server without its tap, so every guard runs
// in the interceptors (and refusals carry the pushback trailer).
func interceptorsOnly(s *Server) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(s.StreamServerInterceptor()),
	}
}

func retryInfo(t *testing.T, err error) (time.Duration, bool) {
	t.Helper()
	return RetryDelay(err)
}

func quotaSubject(err error) string {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if q, ok := d.(*errdetails.QuotaFailure); ok && len(q.GetViolations()) > 0 {
			return q.GetViolations()[0].GetSubject()
		}
	}
	return ""
}

// TestRefusals asserts code, message, details and trailer for each kind of
// refusal, refused in the tap and in the interceptor.
func TestRefusals(t *testing.T) {
	type want struct {
		code     codes.Code
		msg      string
		retry    time.Duration // 0: no RetryInfo expected
		quota    string
		pushback string // trailer value; "" for none
	}
	tests := []struct {
		name  string
		rules func() []decide.Rule
		md    metadata.MD
		ctx   func() (context.Context, context.CancelFunc)
		prime int // calls that succeed before the refused one
		tap   want
		icpt  want
	}{
		{
			name: "rate",
			rules: func() []decide.Rule {
				return []decide.Rule{{Guards: []admission.Guard{ratelimit.NewGuard("rate", mustLimiter(t, ratelimit.Every(time.Hour), 1))}}}
			},
			prime: 1,
			tap:   want{code: codes.ResourceExhausted, msg: "levee: rate: rate limit exceeded", retry: time.Hour},
			icpt:  want{code: codes.ResourceExhausted, msg: "levee: rate: rate limit exceeded", retry: time.Hour, pushback: "3600000"},
		},
		{
			name: "per key with QuotaFailure",
			rules: func() []decide.Rule {
				return []decide.Rule{{Key: decide.HeaderKey("X-Tenant-ID"), Guards: []admission.Guard{ratelimit.NewKeyedGuard("tenant", mustKeyed(t, ratelimit.Every(time.Minute), 1, ratelimit.WithSweepInterval(0)))}}}
			},
			md:    metadata.Pairs("x-tenant-id", "acme"),
			prime: 1,
			tap:   want{code: codes.ResourceExhausted, msg: "levee: tenant: per-key rate limit exceeded", retry: time.Minute, quota: "acme"},
			icpt:  want{code: codes.ResourceExhausted, msg: "levee: tenant: per-key rate limit exceeded", retry: time.Minute, quota: "acme", pushback: "60000"},
		},
		{
			name: "rule code UNAVAILABLE",
			rules: func() []decide.Rule {
				return []decide.Rule{{Code: decide.Unavailable, Guards: []admission.Guard{ratelimit.NewGuard("rate", mustLimiter(t, 0, 1))}}}
			},
			prime: 1,
			tap:   want{code: codes.Unavailable, msg: "levee: rate: rate limit exceeded"},
			icpt:  want{code: codes.Unavailable, msg: "levee: rate: rate limit exceeded", pushback: "-1"},
		},
		{
			name: "deadline shorter than service time",
			rules: func() []decide.Rule {
				return []decide.Rule{{Guards: []admission.Guard{mustDeadline(t, deadline.WithServiceTime(emptyCall, time.Hour))}}}
			},
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), time.Minute)
			},
			tap: want{code: codes.DeadlineExceeded, msg: "levee: deadline: deadline shorter than the method's service time"},
			icpt: want{code: codes.DeadlineExceeded, msg: "levee: deadline: deadline shorter than the method's service time",
				pushback: "-1"},
		},
	}
	for _, tt := range tests {
		for _, mode := range []string{"tap", "interceptor"} {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				s := mustServer(t, tt.rules())
				sopts, w := s.ServerOptions(), tt.tap
				if mode == "interceptor" {
					sopts, w = interceptorsOnly(s), tt.icpt
				}
				env := startServer(t, &testService{}, false, sopts)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if tt.ctx != nil {
					ctx, cancel = tt.ctx()
				}
				defer cancel()
				if tt.md != nil {
					ctx = metadata.NewOutgoingContext(ctx, tt.md)
				}
				for i := range tt.prime {
					if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
						t.Fatalf("priming call %d: %v", i, err)
					}
				}
				var trailer metadata.MD
				_, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}, grpc.Trailer(&trailer))
				st := status.Convert(err)
				if st.Code() != w.code || st.Message() != w.msg {
					t.Errorf("EmptyCall() = %v %q, want %v %q", st.Code(), st.Message(), w.code, w.msg)
				}
				got, ok := retryInfo(t, err)
				if w.retry == 0 && ok {
					t.Errorf("RetryInfo = %v, want none", got)
				}
				if w.retry != 0 && (!ok || got < w.retry-time.Second || got > w.retry) {
					t.Errorf("RetryInfo = %v (present %v), want about %v", got, ok, w.retry)
				}
				if q := quotaSubject(err); q != w.quota {
					t.Errorf("QuotaFailure subject = %q, want %q", q, w.quota)
				}
				// The tap cannot set trailers; the interceptor must. The delay
				// is computed when the call is refused, a little after the
				// priming call: allow it to be up to a second short.
				if got := strings.Join(trailer.Get(PushbackTrailer), ","); got != w.pushback {
					g, gerr := strconv.Atoi(got)
					wnt, _ := strconv.Atoi(w.pushback)
					if w.pushback == "" || w.pushback == "-1" || gerr != nil || g > wnt || g < wnt-1000 {
						t.Errorf("trailer %s = %q, want %q", PushbackTrailer, got, w.pushback)
					}
				}
				if n := env.svc.calls.Load(); n != int64(tt.prime) {
					t.Errorf("handler ran %d times, want %d: a refused call must not reach it", n, tt.prime)
				}
			})
		}
	}
}

func TestExemptMethodsNeverRefused(t *testing.T) {
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{ratelimit.NewGuard("rate", mustLimiter(t, 0, 1))}}})
	env := startServer(t, &testService{}, false, s.ServerOptions())
	ctx := context.Background()
	for i := range 20 {
		if _, err := env.health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("health check %d refused: %v", i, err)
		}
	}
	env.client.EmptyCall(ctx, &testgrpc.Empty{}) // takes the one token
	if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("guarded EmptyCall = %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := env.health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check after the bucket emptied: %v, want served", err)
	}

	// WithExempt() guards health checks too.
	s2 := mustServer(t, []decide.Rule{{Guards: []admission.Guard{ratelimit.NewGuard("rate", mustLimiter(t, 0, 1))}}}, WithExempt())
	env2 := startServer(t, &testService{}, false, s2.ServerOptions())
	env2.health.Check(ctx, &healthpb.HealthCheckRequest{})
	if _, err := env2.health.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("health check with WithExempt() = %v, want RESOURCE_EXHAUSTED", err)
	}
}

// TestLaterRefusalReturnsEarlierPermits: a call the bucket admits and the
// bulkhead refuses gets its token back.
func TestLaterRefusalReturnsEarlierPermits(t *testing.T) {
	for _, mode := range []string{"tap", "interceptor"} {
		t.Run(mode, func(t *testing.T) {
			lim := mustLimiter(t, 0, 2) // no refill: tokens only come back by refund
			bh := mustBulkhead(t, 1)
			s := mustServer(t, []decide.Rule{{Methods: []string{emptyCall}, Guards: []admission.Guard{
				bulkhead.NewGuard("slots", bh, 0), ratelimit.NewGuard("rate", lim), // given out of order: rate runs first
			}}})
			sopts := s.ServerOptions()
			if mode == "interceptor" {
				sopts = interceptorsOnly(s)
			}
			svc := &testService{block: make(chan struct{}), entered: make(chan struct{}, 1)}
			env := startServer(t, svc, false, sopts)
			ctx := context.Background()
			done := make(chan error, 1)
			go func() { _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); done <- err }()
			<-svc.entered // the first call holds the slot and one token
			_, err := env.client.EmptyCall(ctx, &testgrpc.Empty{})
			if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "slots") {
				t.Fatalf("second EmptyCall = %v, want RESOURCE_EXHAUSTED from the bulkhead", err)
			}
			if got := lim.Tokens(time.Now()); got != 1 {
				t.Errorf("Limiter.Tokens() = %v after the bulkhead refused, want 1 (the token given back)", got)
			}
			close(svc.block)
			if err := <-done; err != nil {
				t.Fatalf("first EmptyCall: %v", err)
			}
			if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
				t.Errorf("third EmptyCall (uses the returned token) = %v", err)
			}
			if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); status.Code(err) != codes.ResourceExhausted {
				t.Errorf("fourth EmptyCall = %v, want RESOURCE_EXHAUSTED: both tokens used", err)
			}
			if got := bh.InFlight(); got != 0 {
				t.Errorf("Bulkhead.InFlight() = %d after all calls ended, want 0", got)
			}
			stats := s.Stats()
			if stats[0].Guard != "rate" || stats[1].Guard != "slots" {
				t.Errorf("guard order %q, %q, want rate before slots (cheapest first)", stats[0].Guard, stats[1].Guard)
			}
			if stats[1].Refused != 1 || stats[1].Admitted != 2 || stats[0].Admitted != 3 || stats[0].Refused != 1 {
				t.Errorf("Stats() = %+v, want rate 3 admitted 1 refused, slots 2 admitted 1 refused", stats)
			}
		})
	}
}

// TestStreamHoldsSlotForLife: a stream is admitted once and holds its
// bulkhead slot until it ends.
func TestStreamHoldsSlotForLife(t *testing.T) {
	bh := mustBulkhead(t, 1)
	lim := mustLimiter(t, 0, 3)
	s := mustServer(t, []decide.Rule{{Methods: []string{"/grpc.testing.TestService/*"}, Guards: []admission.Guard{ratelimit.NewGuard("rate", lim), bulkhead.NewGuard("slots", bh, 0)}}})
	env := startServer(t, &testService{}, true, s.ServerOptions())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := env.client.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 { // many messages, one admission
		if err := stream.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("stream.Recv() = %v", err)
		}
	}
	if got := lim.Tokens(time.Now()); got != 2 {
		t.Errorf("tokens = %v after 5 messages on one stream, want 2 (one admission)", got)
	}
	if got := bh.InFlight(); got != 1 {
		t.Errorf("Bulkhead.InFlight() = %d while the stream is open, want 1", got)
	}
	if _, err := env.client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("UnaryCall while the stream holds the slot = %v, want RESOURCE_EXHAUSTED", err)
	}
	s2, err := env.client.FullDuplexCall(ctx)
	if err == nil {
		_, err = s2.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second stream = %v, want RESOURCE_EXHAUSTED", err)
	}
	stream.CloseSend()
	if _, err := stream.Recv(); err == nil {
		t.Fatal("stream.Recv() after CloseSend = nil, want io.EOF")
	}
	waitFor(t, "slot released at stream end", func() bool { return bh.InFlight() == 0 })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFloodKeepsHandlersAtBulkheadBound fires many concurrent calls at a
// bulkhead of 4 whose handlers block: exactly 4 handlers ever run; the
// rest are refused in the tap without a handler.
func TestFloodKeepsHandlersAtBulkheadBound(t *testing.T) {
	const bound, flood = 4, 200
	bh := mustBulkhead(t, bound)
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{bulkhead.NewGuard("slots", bh, 10*time.Millisecond)}}})
	svc := &testService{block: make(chan struct{}), entered: make(chan struct{}, flood)}
	env := startServer(t, svc, true, s.ServerOptions())
	ctx := context.Background()
	var wg sync.WaitGroup
	var refused, ok atomic.Int64
	for range bound {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); err == nil {
				ok.Add(1)
			}
		}()
	}
	for range bound {
		<-svc.entered
	}
	var floodWG sync.WaitGroup
	for range flood - bound {
		floodWG.Add(1)
		go func() {
			defer floodWG.Done()
			_, err := env.client.EmptyCall(ctx, &testgrpc.Empty{})
			if status.Code(err) == codes.ResourceExhausted {
				refused.Add(1)
			}
		}()
	}
	floodWG.Wait()
	if got := svc.running.Load(); got != bound {
		t.Errorf("handlers running = %d during the flood, want the bound %d", got, bound)
	}
	close(svc.block)
	wg.Wait()
	if got := refused.Load(); got != flood-bound {
		t.Errorf("refused %d, want %d", got, flood-bound)
	}
	if got := svc.peak.Load(); got != bound {
		t.Errorf("peak concurrent handlers = %d, want %d", got, bound)
	}
	if got := s.HandlerStarts(); got != bound {
		t.Errorf("Server.HandlerStarts() = %d, want %d", got, bound)
	}
}

// TestPeerKeyOverLoopback: over a real 127.0.0.1 connection, decide.PeerKey keys
// calls by the client's IP, in the tap and in the interceptor alike.
func TestPeerKeyOverLoopback(t *testing.T) {
	for _, tap := range []bool{true, false} {
		rules := []decide.Rule{{Key: decide.PeerKey(), Guards: []admission.Guard{ratelimit.NewKeyedGuard("client", mustKeyed(t, ratelimit.Every(time.Hour), 2, ratelimit.WithSweepInterval(0)))}}}
		s := mustServer(t, rules)
		opts := s.ServerOptions()
		if !tap {
			opts = interceptorsOnly(s)
		}
		env := startServer(t, &testService{}, true, opts)
		for i := range 2 {
			if _, err := env.client.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
				t.Fatalf("tap %v: call %d = %v", tap, i, err)
			}
		}
		_, err := env.client.EmptyCall(context.Background(), &testgrpc.Empty{})
		if got := quotaSubject(err); got != "127.0.0.1" {
			t.Errorf("tap %v: third call = %v, QuotaFailure subject %q, want the client IP 127.0.0.1", tap, err, got)
		}
	}
}
