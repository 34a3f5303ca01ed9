package grpcguard

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/clock/clocktest"
)

// TestSustainedOverloadWithoutTheTap: a server that installs the
// interceptors without the tap says so once refusals are sustained, as
// one with it does: SUSTAINED_OVERLOAD and a pushback of -1, for unary
// calls and streams, whether or not the client ever retried (no tap
// refused first, so every refusal can carry the trailer).
func TestSustainedOverloadWithoutTheTap(t *testing.T) {
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{&refuseAll{}}}})
	clk := clocktest.New(time.Now())
	s.clock.Fake = clk.Now
	env := startServer(t, &testService{}, true, interceptorsOnly(s))
	unary := func() wireRefusal {
		var tr metadata.MD
		_, err := env.client.EmptyCall(context.Background(), &testgrpc.Empty{}, grpc.Trailer(&tr))
		return readRefusal(err, tr)
	}
	stream := func() wireRefusal {
		st, err := env.client.FullDuplexCall(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		if err == nil || err == io.EOF {
			t.Fatalf("stream: %v, want refused", err)
		}
		return readRefusal(err, st.Trailer())
	}
	first := unary()
	if first.code != codes.ResourceExhausted || first.info.GetReason() == string(decide.ReasonSustainedOverload) || len(first.pushback) != 1 || first.pushback[0] != "50" {
		t.Fatalf("first refusal: %v %v, pushback %q; want RESOURCE_EXHAUSTED, not sustained, pushback [50]", first.code, first.info, first.pushback)
	}
	for range 12 { // 1.2s of refusals, 100ms apart: sustained
		clk.Advance(100 * time.Millisecond)
		unary()
	}
	for name, got := range map[string]wireRefusal{"unary": unary(), "stream": stream()} {
		if got.code != codes.ResourceExhausted || got.info.GetReason() != string(decide.ReasonSustainedOverload) || len(got.pushback) != 1 || got.pushback[0] != "-1" {
			t.Errorf("%s, sustained: %v %v, pushback %q; want RESOURCE_EXHAUSTED, SUSTAINED_OVERLOAD and [-1]", name, got.code, got.info, got.pushback)
		}
	}
}

// TestStreamCapRefusesWithTheRulesCode: a stream beyond the cap is
// refused with its rule's code, with the tap and without it.
func TestStreamCapRefusesWithTheRulesCode(t *testing.T) {
	for _, tapped := range []bool{true, false} {
		s := mustServer(t, []decide.Rule{{Code: decide.Unavailable, Guards: []admission.Guard{&recorder{}}}}, WithStreamLimits(1, 0))
		opts := s.ServerOptions()
		if !tapped {
			opts = interceptorsOnly(s)
		}
		got, err := secondStream(t, startServer(t, &testService{}, true, opts))
		if got.code != codes.Unavailable || got.info.GetReason() != string(decide.ReasonTooManyStreams) {
			t.Errorf("tap %v: second stream beyond the cap of 1: %v, ErrorInfo %v; want UNAVAILABLE, TOO_MANY_STREAMS", tapped, err, got.info)
		}
	}
}
