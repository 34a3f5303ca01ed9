package grpcguard

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/clock/clocktest"
	"github.com/levee-go/levee/internal/guardtest"
	"github.com/levee-go/levee/runlimit"
)

// TestLateRequestBodyIsNotQueue: unary calls whose client sent their
// HEADERS and holds their body (a saturated load generator, a slow
// uploader) are not the server's queue. With more of them held than the
// run limit's lane holds: the lane does not count them as waiting for a
// turn, and a call arriving a while later on an idle server is admitted
// (before the fix both failed: the held calls counted as waiting, and
// their places filled the lane, so the call was refused on the lane's
// evidence of overload); the held calls, released, run. Time is the
// server's fake clock.
func TestLateRequestBodyIsNotQueue(t *testing.T) {
	const hold = 30 * time.Millisecond // three of the Limiter's intervals
	l, err := runlimit.New(runlimit.WithBounds(1, 1), runlimit.WithQueueTarget(time.Millisecond), runlimit.WithInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rec := &guardtest.Forced{} // admits every call, and counts them
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{rec, runlimit.NewGuard("run", l)}}})
	clk := clocktest.New(time.Now())
	s.clock.Fake = clk.Now
	// A service time of 20ms: a lane of one call holds two intervals'
	// work at a limit of 1, evidence of overload for that lane.
	f := l.Flow(emptyCall)
	tk, _ := f.TryAcquire(clk.Now())
	tk.Done(clk.Now().Add(20*time.Millisecond), false)
	lane := f.Lane("", admission.Critical)
	env := startServer(t, &testService{}, true, s.ServerOptions())
	ctx := t.Context()

	// Three calls send their HEADERS and hold their body: the lane's
	// bound is two calls (and one more, by Admissible's rule).
	var held []grpc.ClientStream
	for range 3 {
		cs, err := env.conn.NewStream(ctx, &grpc.StreamDesc{}, emptyCall)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, cs)
	}
	if !rec.Wait(ctx, func(admits, _, _ int) bool { return admits == 3 }) {
		t.Fatal("the tap never saw the three held calls")
	}
	if w := lane.Waiting(); w != 0 {
		t.Errorf("with 3 calls' bodies held: lane.Waiting() = %d, want 0 (they wait for their clients, not for a turn)", w)
	}

	clk.Advance(hold)
	if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Errorf("a call arriving %v after 3 held ones, on an idle server = %v, want admitted", hold, err)
	}

	for i, cs := range held {
		if err := cs.SendMsg(&testgrpc.Empty{}); err != nil {
			t.Fatalf("held call %d: SendMsg = %v", i, err)
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatalf("held call %d: CloseSend = %v", i, err)
		}
		if err := cs.RecvMsg(&testgrpc.Empty{}); err != nil {
			t.Errorf("held call %d released after %v = %v, want success", i, hold, err)
		}
	}
	if w := lane.Waiting(); w != 0 {
		t.Errorf("after every call: lane.Waiting() = %d, want 0", w)
	}
}
