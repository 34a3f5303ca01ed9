package redislimit

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

func TestGuardInChain(t *testing.T) {
	s, c := single(t)
	var us atomic.Int64
	us.Store(1_700_000_000_000_000)
	l := mustNew(t, c, "guard", 10, 2, withRedisNow(us.Load), WithHeartbeat(time.Minute, 2*time.Minute))
	tests := []struct {
		name       string
		scope      Scope
		wantKey    string
		wantPerKey bool
	}{
		{"global", 0, "levee:guard:{}", false},
		{"by key", ByKey, "levee:guard:{acme}", true},
		{"by method", ByMethod, "levee:guard:{/pkg.S/M}", false},
		{"by both", ByMethod | ByKey, "levee:guard:{/pkg.S/M|acme}", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGuard("fleet", l, tt.scope)
			if tr := admission.TraitsOf(g); tr.Cost != Cost || !tr.IgnoresDuration || !tr.FinishesSkippedOnly {
				t.Fatalf("Traits = %+v, want cost %d, ignores duration, finishes skipped only", tr, Cost)
			}
			ch, err := admission.NewChain("r", []admission.Guard{g})
			if err != nil {
				t.Fatal(err)
			}
			var call admission.Call
			call.Init(context.Background(), "/pkg.S/M", time.Now())
			call.Key = "acme"
			for n := range 2 {
				var ps admission.Permits
				if i, d := ch.Enter(&call, &ps); i >= 0 {
					t.Fatalf("Enter #%d refused: %+v", n, d)
				}
				ch.Finish(&call, &ps, admission.Outcome{})
			}
			var ps admission.Permits
			i, d := ch.Enter(&call, &ps)
			if i != 0 || !d.Refused || d.Reason != ReasonFleet || d.RetryAfter != 100*time.Millisecond || d.PerKey != tt.wantPerKey {
				t.Fatalf("third Enter = %d, %+v; want refused by %q after 100ms, PerKey %v", i, d, ReasonFleet, tt.wantPerKey)
			}
			if got := s.Do("EXISTS", tt.wantKey); got != "1" {
				t.Fatalf("EXISTS %s = %s, want 1", tt.wantKey, got)
			}
		})
	}
	call := admission.Call{Key: "nil-ctx"} // the zero Call has no context
	if d := NewGuard("fleet", l, ByKey).Admit(call); d.Refused {
		t.Fatalf("Admit of a Call without context = %+v, want admitted", d)
	}
}
