package protect_test

import (
	"context"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/memory"
	"github.com/levee-go/levee/metrics"
	"github.com/levee-go/levee/protect"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(costServerEnv); mode != "" {
		os.Exit(costServerMain(mode)) // a child of BenchmarkCallCost
	}
	goleak.VerifyTestMain(m)
}

const (
	emptyCall = "/grpc.testing.TestService/EmptyCall"
	unaryCall = "/grpc.testing.TestService/UnaryCall"
)

type service struct {
	testgrpc.UnimplementedTestServiceServer
	work time.Duration
}

func (s *service) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	time.Sleep(s.work)
	return &testgrpc.Empty{}, nil
}

func (s *service) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, nil
}

// serve starts a protected server on loopback and returns a client.
func serve(t *testing.T, svc *service, opts ...protect.Option) (*protect.Server, testgrpc.TestServiceClient) {
	t.Helper()
	p, err := protect.New(append([]protect.Option{protect.WithoutCPU()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p, testgrpc.NewTestServiceClient(serveOn(t, p, svc))
}

// serveOn starts on loopback a server protected by p, with sopts after
// p's options, serving svc, and returns a connection to it. p stops with
// the server.
func serveOn(t *testing.T, p *protect.Server, svc *service, sopts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append(p.ServerOptions(), sopts...)...)
	testgrpc.RegisterTestServiceServer(gs, svc)
	go gs.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		p.Stop()
		p.Stop() // idempotent
	})
	return conn
}

func TestNewRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		give []protect.Option
		want []string
	}{
		{"max rate", []protect.Option{protect.WithMaxRate(-1)}, []string{"protect: WithMaxRate: rate must be >= 0, got -1"}},
		{"concurrency", []protect.Option{protect.WithMaxConcurrency(-2)}, []string{"protect: WithMaxConcurrency: n must be >= 0, got -2"}},
		{"client rate", []protect.Option{protect.WithClientRate(-3)}, []string{"protect: WithClientRate: rate must be >= 0, got -3"}},
		{"method name", []protect.Option{protect.WithMethod("Allocate", protect.Method{})}, []string{`protect: WithMethod("Allocate"): want a full method name`}},
		{"method rate", []protect.Option{protect.WithMethod(emptyCall, protect.Method{MaxRate: -1})}, []string{`protect: WithMethod("/grpc.testing.TestService/EmptyCall"): MaxRate must be >= 0, got -1`}},
		{"code", []protect.Option{protect.WithCode(codes.Internal)}, []string{"protect: WithCode: want RESOURCE_EXHAUSTED or UNAVAILABLE, got INTERNAL"}},
		{"nil guard", []protect.Option{protect.WithGuard(nil)}, []string{"protect: WithGuard: guard 0 is nil"}},
		{"nil pointer guard", []protect.Option{protect.WithGuard(&refuseAfter{}, (*refuseAfter)(nil))}, []string{"protect: WithGuard: guard 1 is nil"}},
		{"all at once", []protect.Option{protect.WithMaxRate(-1), protect.WithClientRate(-1), protect.WithCode(codes.NotFound)}, []string{"WithMaxRate", "WithClientRate", "WithCode"}},
		{"tenant key", []protect.Option{protect.WithTenants(nil, nil)}, []string{"protect: WithTenants: nil key"}},
		{"tenant weight", []protect.Option{protect.WithTenants(decide.HeaderKey("x-tenant-id"), map[string]float64{"acme": 0})}, []string{`protect: WithTenants: weight of "acme" must be > 0 and <= 1e6, got 0`}},
		{"tenant weights", []protect.Option{protect.WithTenants(decide.HeaderKey("x-tenant-id"), map[string]float64{"": 1, strings.Repeat("a", 129): 1, "b": math.Inf(1)})}, []string{
			"protect: WithTenants: empty tenant name", "protect: WithTenants: tenant name of 129 bytes, longer than 128", `protect: WithTenants: weight of "b" must be > 0 and <= 1e6, got +Inf`}},
		{"criticality", []protect.Option{protect.WithCriticality(decide.Criticality{Default: 5})}, []string{"Criticality: Default: class 5 is not one of the four classes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := protect.New(tt.give...)
			if p != nil || err == nil {
				t.Fatalf("New() = %v, %v; want nil and an error", p, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New() error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestTenantWeightErrorNamesWithTenants: a bad WithTenants weight is
// reported as WithTenants' (Option: "an error naming every bad option").
// Before, the run limit refused it as
// "protect: max_concurrency: runlimit: WithTenantWeights: ...", naming
// an option the user did not give.
func TestTenantWeightErrorNamesWithTenants(t *testing.T) {
	p, err := protect.New(protect.WithoutCPU(), protect.WithoutMemory(), protect.WithTenants(decide.HeaderKey("x-tenant-id"), map[string]float64{"a": 0}))
	if p != nil {
		p.Stop()
	}
	if err == nil || !strings.Contains(err.Error(), "WithTenants") || strings.Contains(err.Error(), "max_concurrency") {
		t.Errorf("New(WithTenants(key, {a: 0})) error = %v; want one naming WithTenants, not max_concurrency", err)
	}
}

// TestLearnsServiceTimeAfterTheTurn: over real gRPC, calls pass, and the
// service time the preset learns is the handler's, not the wait for a
// turn.
func TestLearnsServiceTimeAfterTheTurn(t *testing.T) {
	p, client := serve(t, &service{work: 2 * time.Millisecond}, protect.WithMaxConcurrency(1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 4)
	for range 4 {
		go func() {
			var err error
			for range 10 {
				if _, err = client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil && status.Code(err) != codes.ResourceExhausted {
					break
				}
				err = nil
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatalf("EmptyCall: %v", err)
		}
	}
	// With one turn and four callers, calls waited for turns; the learned
	// time is still about the 2ms handler (well under 3 waits' worth).
	got := p.RunLimit().Flow(emptyCall).ServiceTime()
	if got < 2*time.Millisecond || got > 5*time.Millisecond {
		t.Errorf("learned service time %v for a 2ms handler behind one turn, want it within [2ms, 5ms]", got)
	}
	if dl := p.Deadline().ServiceTime(emptyCall); dl < 2*time.Millisecond || dl > 5*time.Millisecond {
		t.Errorf("deadline guard's service time %v, want within [2ms, 5ms]", dl)
	}
	if p.RunLimit().Running() != 0 || p.RunLimit().Waiting() != 0 {
		t.Errorf("after the calls: running %d, waiting %d; want 0, 0", p.RunLimit().Running(), p.RunLimit().Waiting())
	}
}

// TestNilPointerSignalsLeaveTheDefault: a nil pointer given as the CPU or
// memory signal (a monitor that could not start) is taken as nil, the
// default, and calls are served; the run limit used to call the nil
// *cpu.Monitor at a call and panic.
func TestNilPointerSignalsLeaveTheDefault(t *testing.T) {
	_, client := serve(t, &service{}, protect.WithCPU((*cpu.Monitor)(nil)), protect.WithMemory((*memory.Monitor)(nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
			t.Fatalf("EmptyCall: %v", err)
		}
	}
}

func TestMethodOverrides(t *testing.T) {
	p, client := serve(t, &service{},
		protect.WithMethod(unaryCall, protect.Method{MaxRate: 1}),
		protect.WithMethod(emptyCall, protect.Method{Exempt: true}))
	ctx := context.Background()
	if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatalf("first UnaryCall: %v", err)
	}
	_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "method-rate") {
		t.Fatalf("second UnaryCall at 1/s = %v, want RESOURCE_EXHAUSTED from method-rate", err)
	}
	if d, ok := grpcguard.RetryDelay(err); !ok || d <= 0 {
		t.Errorf("refusal's RetryDelay = %v, %v; want a positive delay", d, ok)
	}
	for range 50 {
		if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
			t.Fatalf("exempt EmptyCall: %v", err)
		}
	}
	for _, s := range p.Guard().Stats() {
		if s.Rule == "default" && s.Admitted+s.Refused > 0 {
			t.Errorf("default rule counted %+v; the exempt method should not reach it", s)
		}
	}
}

// refuseAfter admits its first n calls and refuses the rest, and records
// each call's tenant.
type refuseAfter struct {
	n       int
	mu      sync.Mutex
	tenants []string
}

func (g *refuseAfter) Name() string { return "mine" }

func (g *refuseAfter) Admit(c admission.Call) admission.Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tenants = append(g.tenants, c.Tenant)
	if len(g.tenants) > g.n {
		return admission.Refuse("mine says no", time.Second)
	}
	return admission.Decision{}
}

func (g *refuseAfter) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// TestWithGuard: a guard of one's own decides in the default rule and in
// a method's rule, sees the tenant, and its refusal is the server's.
func TestWithGuard(t *testing.T) {
	g := &refuseAfter{n: 2}
	_, client := serve(t, &service{}, protect.WithGuard(g),
		protect.WithTenants(decide.HeaderKey("x-tenant-id"), nil),
		protect.WithMethod(unaryCall, protect.Method{MaxRate: 1000}))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", "acme")
	if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Fatalf("EmptyCall 1: %v", err)
	}
	if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatalf("UnaryCall 2: %v", err)
	}
	_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "mine says no") {
		t.Fatalf("EmptyCall 3 = %v, want RESOURCE_EXHAUSTED from the guard given", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if want := []string{"acme", "acme", "acme"}; !slices.Equal(g.tenants, want) {
		t.Errorf("the guard saw tenants %q, want %q", g.tenants, want)
	}
}

func TestRegisterMetrics(t *testing.T) {
	p, client := serve(t, &service{}, protect.WithMaxRate(1000), protect.WithClientRate(100))
	if _, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	reg := metrics.New()
	if err := p.Register(reg); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"levee_decisions_total": false, "levee_runlimit_limit": false, "levee_limit_rate": false, "levee_keyed_keys": false}
	for _, mf := range mfs {
		if _, ok := want[mf.GetName()]; ok {
			want[mf.GetName()] = true
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("metric %s not exported", name)
		}
	}
}
