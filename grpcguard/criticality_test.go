package grpcguard

import (
	"context"
	"net/netip"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// recorder is a guard that admits every call and records its class and
// tenant.
type recorder struct {
	mu      sync.Mutex
	classes []admission.Criticality
	tenants []string
}

func (r *recorder) Name() string { return "recorder" }
func (r *recorder) Admit(c admission.Call) admission.Decision {
	r.mu.Lock()
	r.classes = append(r.classes, c.Class)
	r.tenants = append(r.tenants, c.Tenant)
	r.mu.Unlock()
	return admission.Decision{}
}
func (r *recorder) Finish(admission.Call, admission.Permit, admission.Outcome) {}

func (r *recorder) last(t *testing.T) (admission.Criticality, string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.classes) == 0 {
		t.Fatal("no call reached the guard")
	}
	return r.classes[len(r.classes)-1], r.tenants[len(r.tenants)-1]
}

func TestCriticalityTrustModel(t *testing.T) {
	for _, mode := range []string{"tap", "interceptors"} {
		for _, trusted := range []bool{false, true} {
			rec := &recorder{}
			crit := &decide.Criticality{Methods: map[string]admission.Criticality{unaryCall: admission.SheddablePlus, "/grpc.testing.TestService/*": admission.Critical, "/other.Service/*": admission.Sheddable}}
			if trusted {
				crit.Trusted = decide.TrustPeers(netip.MustParsePrefix("127.0.0.0/8"))
			} else {
				crit.Trusted = decide.TrustPeers(netip.MustParsePrefix("10.0.0.0/8"))
			}
			s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{rec}, Criticality: crit, Tenant: decide.HeaderKey("x-tenant-id")}})
			opts := s.ServerOptions()
			if mode == "interceptors" {
				opts = interceptorsOnly(s)
			}
			env := startServer(t, &testService{}, true, opts)
			for _, tc := range []struct {
				claim  string
				unary  bool
				want   admission.Criticality
				tenant string
			}{
				{"", false, admission.Critical, ""},
				{"", true, admission.SheddablePlus, "acme"},
				{"sheddable", false, admission.Sheddable, "acme"},
				{"SHEDDABLE", true, admission.Sheddable, ""},
				{"no-such-class", false, admission.Critical, ""},
				{"critical", true, map[bool]admission.Criticality{false: admission.SheddablePlus, true: admission.Critical}[trusted], ""},
				{"critical_plus", false, map[bool]admission.Criticality{false: admission.Critical, true: admission.CriticalPlus}[trusted], "b"},
			} {
				ctx := context.Background()
				if tc.claim != "" {
					ctx = metadata.AppendToOutgoingContext(ctx, decide.CriticalityHeader, tc.claim)
				}
				if tc.tenant != "" {
					ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant-id", tc.tenant)
				}
				var err error
				if tc.unary {
					_, err = env.client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
				} else {
					_, err = env.client.EmptyCall(ctx, &testgrpc.Empty{})
				}
				if err != nil {
					t.Fatalf("%s: call = %v", mode, err)
				}
				class, tenant := rec.last(t)
				if class != tc.want || tenant != tc.tenant {
					t.Errorf("%s, trusted %v: claim %q on unary=%v: class %v, tenant %q; want %v, %q", mode, trusted, tc.claim, tc.unary, class, tenant, tc.want, tc.tenant)
				}
			}
		}
	}
}

func outgoingClass(ctx context.Context) string {
	v := metadata.ValueFromOutgoingContext(ctx, decide.CriticalityHeader)
	if len(v) != 1 {
		return ""
	}
	return v[0]
}

func TestClientPropagatesCriticality(t *testing.T) {
	// The class the serving rule gave the call travels on, lowered if the
	// claim was not trusted.
	rec := &recorder{}
	front := mustServer(t, []decide.Rule{{Guards: []admission.Guard{rec}, Criticality: &decide.Criticality{}}})
	got := make(chan string, 4)
	down := startServer(t, &testService{}, true, []grpc.ServerOption{grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		got <- first(metadata.ValueFromIncomingContext(ctx, decide.CriticalityHeader))
		return h(ctx, req)
	})})
	cl, err := NewClient()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(down.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(cl.UnaryClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	downstream := testgrpc.NewTestServiceClient(conn)
	svc := &relay{next: downstream}
	fenv := startRelay(t, svc, front.ServerOptions())
	for _, tc := range []struct{ claim, want string }{
		{"", "critical"},
		{"critical_plus", "critical"}, // not trusted: lowered
		{"sheddable", "sheddable"},
	} {
		ctx := context.Background()
		if tc.claim != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, decide.CriticalityHeader, tc.claim)
		}
		if _, err := fenv.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
			t.Fatal(err)
		}
		if v := <-got; v != tc.want {
			t.Errorf("claim %q at the front: downstream saw %q, want %q", tc.claim, v, tc.want)
		}
	}
	// Code may override the class.
	svc.override = true
	if _, err := fenv.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != "sheddable_plus" {
		t.Errorf("with WithOutgoingCriticality: downstream saw %q, want sheddable_plus", v)
	}
	// Without a serving rule, only a claim at or below critical passes on.
	for _, tc := range []struct{ claim, want string }{{"critical_plus", ""}, {"sheddable_plus", "sheddable_plus"}, {"bogus", ""}} {
		in := metadata.NewIncomingContext(context.Background(), metadata.Pairs(decide.CriticalityHeader, tc.claim))
		if v := outgoingClass(propagateCriticality(in)); v != tc.want {
			t.Errorf("incoming %q with no rule: propagated %q, want %q", tc.claim, v, tc.want)
		}
	}
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// relay serves EmptyCall by calling next's, with the serving context.
type relay struct {
	testgrpc.UnimplementedTestServiceServer
	next     testgrpc.TestServiceClient
	override bool
}

func (r *relay) EmptyCall(ctx context.Context, in *testgrpc.Empty) (*testgrpc.Empty, error) {
	if r.override {
		ctx = WithOutgoingCriticality(ctx, admission.SheddablePlus)
	}
	return r.next.EmptyCall(ctx, in)
}

func startRelay(t *testing.T, r *relay, sopts []grpc.ServerOption) testgrpc.TestServiceClient {
	t.Helper()
	gs := grpc.NewServer(sopts...)
	testgrpc.RegisterTestServiceServer(gs, r)
	return serveOn(t, gs)
}
