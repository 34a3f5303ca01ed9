package grpcguard

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/ratelimit"
)

// tapRefuser is a Server whose every call is refused in the tap by an
// empty bucket, and the tap's arguments.
func tapRefuser(t testing.TB) (*Server, context.Context, *tap.Info) {
	t.Helper()
	lim := mustLimiter(t, 0, 1)
	lim.Allow() // empty for good
	s := mustServer(t, []decide.Rule{{Tenant: decide.HeaderKey("x-tenant-id"), Guards: []admission.Guard{ratelimit.NewGuard("rate", lim)}}})
	return s, context.Background(), &tap.Info{FullMethodName: emptyCall, Header: metadata.Pairs("x-tenant-id", "acme")}
}

// TestRefusalRecordCostsNothing: recording a refusal for the engine's
// counts and Observer adds no allocation to a refusal in the tap,
// whether an Observer is set or not (the tap allocates the call's state
// before its guards decide, and the refusal's error: status.Status.Err).
func TestRefusalRecordCostsNothing(t *testing.T) {
	s, ctx, info := tapRefuser(t)
	refuse := func() {
		if _, err := s.TapHandle(ctx, info); err == nil {
			t.Fatal("TapHandle admitted a call of an empty bucket")
		}
	}
	refuse()
	without := testing.AllocsPerRun(1000, refuse)
	c := admission.Call{Method: emptyCall, Now: s.now(), Tenant: "acme"}
	rf := decide.NewRefusal(0, "rate", admission.RefuseFor(admission.CauseRateLimited, admission.EvidenceLimit, "r", time.Second), "")
	if n := testing.AllocsPerRun(1000, func() { s.record(&c, rf) }); n != 0 {
		t.Errorf("record without an Observer: %v allocations, want 0", n)
	}
	var told int
	s.Engine().SetObserver(decide.Observer{RefusalsPerSecond: -1, OnRefusal: func(ev decide.RefusalEvent) {
		if ev.Tenant == "acme" {
			told++
		}
	}})
	if n := testing.AllocsPerRun(1000, func() { s.record(&c, rf) }); n != 0 {
		t.Errorf("record with an Observer: %v allocations, want 0", n)
	}
	with := testing.AllocsPerRun(1000, refuse)
	if with != without || without > 2 {
		t.Errorf("a refusal in the tap: %v allocations with an Observer, %v without; want the same, at most 2 (the call's state and its error)", with, without)
	}
	if told < 1000 {
		t.Errorf("Observer told of %d refusals of acme, want every one", told)
	}
}

// BenchmarkTapRefusal is a call refused in the tap by an empty bucket,
// with no Observer (the engine counts it and checks for one) and with
// one told of every refusal.
func BenchmarkTapRefusal(b *testing.B) {
	run := func(b *testing.B, o decide.Observer) {
		s, ctx, info := tapRefuser(b)
		s.Engine().SetObserver(o)
		b.ReportAllocs()
		for b.Loop() {
			_, _ = s.TapHandle(ctx, info)
		}
	}
	b.Run("no-observer", func(b *testing.B) { run(b, decide.Observer{}) })
	b.Run("observer", func(b *testing.B) {
		run(b, decide.Observer{RefusalsPerSecond: -1, OnRefusal: func(decide.RefusalEvent) {}})
	})
	b.Run("observer-sampled", func(b *testing.B) {
		run(b, decide.Observer{OnRefusal: func(decide.RefusalEvent) {}})
	})
}
