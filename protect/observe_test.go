package protect_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/guardtest"
	"github.com/levee-go/levee/protect"
	"github.com/levee-go/levee/statuspage"
)

// TestObserverAndDebugHandler: WithObserver is told of refusals (here a
// tenant's call beyond WithMaxRate) and of the run limit's moves with
// their causes; DebugHandler shows the same refusal and the moves, and
// WithObserver's callbacks are still told after it.
func TestObserverAndDebugHandler(t *testing.T) {
	var ev guardtest.Observed
	p, client := serve(t, &service{}, protect.WithMaxRate(1e-9), protect.WithObserver(ev.Observer()),
		protect.WithTenants(decide.HeaderKey("x-tenant-id"), nil), protect.WithoutMemory())
	page := p.DebugHandler()
	if p.DebugHandler() != page {
		t.Error("DebugHandler() twice: two pages, want one")
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", "acme")
	if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Fatalf("first call (the bucket's one token): %v", err)
	}
	if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call beyond the rate: %v, want RESOURCE_EXHAUSTED", err)
	}
	refusals, _ := ev.Got()
	if len(refusals) != 1 || refusals[0].Guard != "rate" || refusals[0].Reason != decide.ReasonRateLimited ||
		refusals[0].Method != emptyCall || refusals[0].Tenant != "acme" {
		t.Fatalf("Observer told %+v, want one RATE_LIMITED refusal of %s for acme by rate", refusals, emptyCall)
	}

	// The run limit's learner closes intervals as calls end: turns whose
	// ends are given as later instants make it probe its first baseline,
	// a move.
	f := p.RunLimit().Flow(emptyCall)
	start := time.Now()
	for i := range 40 {
		tk, ok := f.TryAcquire(start)
		if !ok {
			break
		}
		tk.Done(start.Add(time.Duration(i+1)*50*time.Millisecond), false)
	}
	_, changes := ev.Got()
	if len(changes) == 0 || changes[0].Guard != "run" || changes[0].Cause != "probe_start/baseline" || changes[0].To >= changes[0].From {
		t.Fatalf("Observer told of moves %+v, want the run limit's first baseline probe lowering it", changes)
	}

	rec := httptest.NewRecorder()
	page.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/levee?format=json", nil))
	var st statuspage.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("debug page JSON: %v\n%s", err, rec.Body)
	}
	if len(st.Refusals) != 1 || st.Refusals[0].Reason != "RATE_LIMITED" || st.Refusals[0].Evidence != "limit" || st.Refusals[0].Tenant != "acme" {
		t.Errorf("page refusals %+v, want the RATE_LIMITED one of acme, on limit", st.Refusals)
	}
	if len(st.RunLimits) != 1 || st.RunLimits[0].Guard != "run" || len(st.RunLimits[0].Moves) == 0 ||
		st.RunLimits[0].Moves[len(st.RunLimits[0].Moves)-1].Cause != "probe_start" {
		t.Errorf("page run limits %+v, want run with its moves, the first a probe's start", st.RunLimits)
	}
	if len(st.RefusalCounts) != 1 || st.RefusalCounts[0] != (statuspage.RefusalCount{Guard: "rate", Reason: "RATE_LIMITED", Evidence: "limit", Count: 1}) {
		t.Errorf("page refusal counts %+v, want rate RATE_LIMITED limit 1", st.RefusalCounts)
	}
}
