package grpcguard

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// TestFarDeadlineRefusedPastTheTap: a call the tap would refuse whose
// deadline is beyond TapRefusalHorizon is refused by the interceptor,
// which ends its stream, so that nothing of it stays in the server until
// its deadline (grpc-go leaves a tap-refused stream's deadline timer and
// context armed, see leftovers). Before, a client sending refused calls
// with deadlines of an hour left each one in the server for an hour or until its
// connection closed (TapLeftovers counted them pending), for a client
// that sends no retry attempt, or paces its refusals, never makes them
// sustained. A call with a near deadline is still refused in the tap,
// which is cheaper.
func TestFarDeadlineRefusedPastTheTap(t *testing.T) {
	s, err := New([]decide.Rule{{Methods: []string{"*"}, Guards: []admission.Guard{alwaysRefuse{}}}})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(s.ServerOptions()...)
	svc := &testService{}
	testgrpc.RegisterTestServiceServer(gs, svc)
	client := serveOn(t, gs)
	call := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
		return err
	}
	// The client sends no retry attempt: the tap never lets these
	// through as sustained refusals.
	for i := range 5 {
		if err := call(time.Hour); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("call %d with a deadline of an hour = %v, want RESOURCE_EXHAUSTED", i, err)
		}
	}
	if n, _ := s.TapLeftovers(time.Now()); n != 0 {
		t.Fatalf("TapLeftovers pending = %d after 5 refusals of calls with a deadline of an hour, want 0: refused past the tap", n)
	}
	if err := call(5 * time.Second); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("call with a deadline of 5 s = %v, want RESOURCE_EXHAUSTED", err)
	}
	if n, _ := s.TapLeftovers(time.Now()); n != 1 {
		t.Fatalf("TapLeftovers pending = %d after a refusal of a call with a deadline of 5 s, want 1: refused in the tap", n)
	}
	if n := svc.calls.Load(); n != 0 {
		t.Fatalf("%d calls reached the handler, want 0", n)
	}
}
