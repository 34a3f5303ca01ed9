package grpcguard

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/clock/clocktest"
)

// waitThenRefuse is a Starter that, as a run limit whose wait for a turn
// runs out, holds the call for wait on clk and then refuses it.
type waitThenRefuse struct {
	clk  *clocktest.Manual
	wait time.Duration
}

func (*waitThenRefuse) Name() string                                               { return "run" }
func (*waitThenRefuse) Admit(admission.Call) admission.Decision                    { return admission.Decision{} }
func (*waitThenRefuse) Finish(admission.Call, admission.Permit, admission.Outcome) {}
func (g *waitThenRefuse) Start(admission.Call, admission.Permit) admission.Decision {
	g.clk.Advance(g.wait)
	return admission.RefuseFor(admission.CauseRunWaitExpired, admission.EvidenceStanding, "full", 100*time.Millisecond)
}

// TestRefusalAfterAWaitIsStampedWhenDecided: a call refused at its Start
// after a wait of 400ms is recorded when it was refused, not when it
// arrived (the Observer's RefusalEvent.Time), whether its Start ran after
// the tap admitted it or in the interceptor alone. The same instant is
// what the sustained run notes: httpguard's test of the same name shows
// what a refusal stamped at its arrival does to it.
func TestRefusalAfterAWaitIsStampedWhenDecided(t *testing.T) {
	const wait = 400 * time.Millisecond
	for _, tapped := range []bool{true, false} {
		name := map[bool]string{true: "admitted in the tap", false: "in the interceptor alone"}[tapped]
		t.Run(name, func(t *testing.T) {
			clk := clocktest.New(time.Unix(1000, 0))
			s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{&waitThenRefuse{clk: clk, wait: wait}}}})
			s.clock.Fake = clk.Now
			var at time.Time
			refusals := 0
			s.engine.SetObserver(decide.Observer{RefusalsPerSecond: -1, OnRefusal: func(ev decide.RefusalEvent) {
				at = ev.Time
				refusals++
			}})
			arrived := clk.Now()
			handler := func(context.Context, any) (any, error) {
				t.Error("the handler ran for a refused call")
				return nil, nil
			}
			var err error
			if tapped {
				_, err = tapThenHandle(t, s, clk, context.Background(), 0)
			} else {
				_, err = s.unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: emptyCall}, handler)
			}
			if err == nil {
				t.Fatal("the call was not refused")
			}
			if refusals != 1 {
				t.Fatalf("the Observer was told of %d refusals, want 1", refusals)
			}
			if got := at.Sub(arrived); got != wait {
				t.Errorf("refused %v after it arrived, after its wait; RefusalEvent.Time says %v after", wait, got)
			}
		})
	}
}
