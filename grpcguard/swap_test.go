package grpcguard

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/ratelimit"
)

// TestSwapFinishesUnderAdmittingRule: a call the tap admitted before a
// Swap gives its slot back to the bulkhead of the rule that admitted it,
// and calls after the Swap see the new rules only.
func TestSwapFinishesUnderAdmittingRule(t *testing.T) {
	oldSlots := mustBulkhead(t, 1)
	s := mustServer(t, []decide.Rule{{Name: "r", Guards: []admission.Guard{bulkhead.NewGuard("slots", oldSlots, 0)}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tctx, err := s.TapHandle(ctx, &tap.Info{FullMethodName: emptyCall})
	if err != nil {
		t.Fatalf("TapHandle before Swap: %v", err)
	}
	if got := oldSlots.InFlight(); got != 1 {
		t.Fatalf("old bulkhead InFlight = %d after admission, want 1", got)
	}

	newSlots := mustBulkhead(t, 1)
	if err := s.Swap([]decide.Rule{{Name: "r", Guards: []admission.Guard{bulkhead.NewGuard("slots", newSlots, 0)}}}); err != nil {
		t.Fatalf("Swap: %v", err)
	}
	// A new call goes to the new bulkhead, which has room.
	var inNew int
	handler := func(context.Context, any) (any, error) { inNew = newSlots.InFlight(); return nil, nil }
	if _, err := s.unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: emptyCall}, handler); err != nil {
		t.Fatalf("call after Swap: %v", err)
	}
	if inNew != 1 {
		t.Errorf("new bulkhead InFlight during a call after Swap = %d, want 1", inNew)
	}
	// The call admitted before the swap runs and gives its slot back to
	// the old bulkhead.
	if _, err := s.unary(tctx, nil, &grpc.UnaryServerInfo{FullMethod: emptyCall}, func(context.Context, any) (any, error) { return nil, nil }); err != nil {
		t.Fatalf("call admitted before Swap: %v", err)
	}
	if got := oldSlots.InFlight(); got != 0 {
		t.Errorf("old bulkhead InFlight = %d after its call ended, want 0", got)
	}
	if got := newSlots.InFlight(); got != 0 {
		t.Errorf("new bulkhead InFlight = %d after its call ended, want 0", got)
	}
}

// TestSwapKeepsCountsOfUnchangedRules: a rule with the same name, guards
// and shadow mode keeps its decision counts across a Swap; a changed rule
// starts again, and a removed rule's counts disappear.
func TestSwapKeepsCountsOfUnchangedRules(t *testing.T) {
	lim := ratelimit.NewGuard("rate", mustLimiter(t, 1e9, 1<<20))
	gone := ratelimit.NewGuard("gone", mustLimiter(t, 1e9, 1<<20))
	s := mustServer(t, []decide.Rule{
		{Name: "kept", Methods: []string{emptyCall}, Guards: []admission.Guard{lim}},
		{Name: "removed", Methods: []string{unaryCall}, Guards: []admission.Guard{gone}},
	})
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for range 3 {
		if _, err := s.unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: emptyCall}, handler); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Swap([]decide.Rule{{Name: "kept", Methods: []string{emptyCall}, Guards: []admission.Guard{lim}, Code: decide.Unavailable}}); err != nil {
		t.Fatalf("Swap: %v", err)
	}
	stats := s.Stats()
	if len(stats) != 1 || stats[0].Rule != "kept" || stats[0].Admitted != 3 {
		t.Errorf("Stats() after Swap = %+v, want one entry for rule kept with Admitted 3", stats)
	}
	if got := s.HandlerStarts(); got != 3 {
		t.Errorf("HandlerStarts() after Swap = %d, want 3", got)
	}
	// The new rule's code is in force.
	refuse := ratelimit.NewGuard("rate", mustLimiter(t, 0, 1))
	if err := s.Swap([]decide.Rule{{Name: "kept", Methods: []string{emptyCall}, Guards: []admission.Guard{refuse}, Code: decide.Unavailable}}); err != nil {
		t.Fatalf("Swap: %v", err)
	}
	for range 2 {
		_, _ = s.unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: emptyCall}, handler)
	}
	if st := s.Stats(); len(st) != 1 || st[0].Admitted != 1 || st[0].Refused != 1 {
		t.Errorf("Stats() after a Swap to a changed rule = %+v, want Admitted 1 Refused 1 (counts start again)", st)
	}
	_, err := s.unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: emptyCall}, handler)
	if status.Code(err) != codes.Unavailable {
		t.Errorf("refusal after Swap: code %v, want UNAVAILABLE (the new rule's)", status.Code(err))
	}
}

// TestSwapErrorChangesNothing: a Swap whose rules do not compile returns
// the error and leaves the rules in force.
func TestSwapErrorChangesNothing(t *testing.T) {
	lim := ratelimit.NewGuard("rate", mustLimiter(t, 1e9, 1<<20))
	s := mustServer(t, []decide.Rule{{Name: "r", Guards: []admission.Guard{lim}}})
	err := s.Swap([]decide.Rule{{Name: "bad", Methods: []string{"nope"}, Guards: []admission.Guard{lim}}})
	if err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("Swap with a bad pattern: err = %v, want one naming \"nope\"", err)
	}
	if st := s.Stats(); len(st) != 1 || st[0].Rule != "r" {
		t.Errorf("Stats() after a failed Swap = %+v, want rule r still in force", st)
	}
	// Exemptions are the Swap's own: without WithExempt, decide.DefaultExempt.
	if err := s.Swap([]decide.Rule{{Name: "r", Guards: []admission.Guard{lim}}}, WithExempt()); err != nil {
		t.Fatal(err)
	}
	if r := s.engine.Match("/grpc.health.v1.Health/Check"); r == nil {
		t.Error("health check exempt after Swap(..., WithExempt()), want guarded")
	}
}

// TestUnaryChainAllocsAfterSwap: the admitted path allocates nothing
// after a Swap either.
func TestUnaryChainAllocsAfterSwap(t *testing.T) {
	s, ctx := chainServer(t)
	lim := ratelimit.NewGuard("global", mustLimiter(t, 1e9, 1<<30))
	if err := s.Swap([]decide.Rule{{Guards: []admission.Guard{lim}}}); err != nil {
		t.Fatal(err)
	}
	checkUnaryAllocs(t, "unary interceptor after Swap", s, ctx)
}
