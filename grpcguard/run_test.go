package grpcguard

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/decide"
)

// TestRunLimitRunsHandlersOneAtATime: behind a bulkhead of 4, a RunLimit
// of 1 with a queue of 2 runs one handler at a time; the others wait their
// turn, and a call with no room in the queue is refused before its
// handler.
func TestRunLimitRunsHandlersOneAtATime(t *testing.T) {
	for _, mode := range []string{"tap", "interceptor"} {
		t.Run(mode, func(t *testing.T) {
			run := mustBulkhead(t, 1, bulkhead.WithQueue(2))
			s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{
				bulkhead.NewRunGuard("run", run, time.Millisecond),
				bulkhead.NewGuard("inflight", mustBulkhead(t, 4), time.Millisecond),
			}}})
			sopts := s.ServerOptions()
			if mode == "interceptor" {
				sopts = interceptorsOnly(s)
			}
			svc := &testService{block: make(chan struct{}), entered: make(chan struct{}, 4)}
			env := startServer(t, svc, false, sopts)
			ctx := context.Background()
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			call := func() {
				defer wg.Done()
				_, err := env.client.EmptyCall(ctx, &testgrpc.Empty{})
				errs <- err
			}
			wg.Add(1)
			go call()
			<-svc.entered // one runs
			for range 2 {
				wg.Add(1)
				go call()
			}
			waitFor(t, "two calls queued for their turn", func() bool { return run.Waiting() == 2 })
			// The queue is full: the fourth call is refused before its handler.
			_, err := env.client.EmptyCall(ctx, &testgrpc.Empty{})
			if st := status.Convert(err); st.Code() != codes.ResourceExhausted || st.Message() != "levee: run: "+bulkhead.ReasonRunQueue {
				t.Errorf("fourth call = %v, want RESOURCE_EXHAUSTED from the run limit", err)
			}
			if got := svc.running.Load(); got != 1 {
				t.Errorf("handlers running = %d, want 1", got)
			}
			close(svc.block)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("queued call = %v, want success", err)
				}
			}
			if got := svc.peak.Load(); got != 1 {
				t.Errorf("peak concurrent handlers = %d, want 1", got)
			}
			if got := svc.calls.Load(); got != 3 {
				t.Errorf("handlers ran %d times, want 3", got)
			}
			if run.InFlight() != 0 {
				t.Errorf("run limit in flight = %d after all calls, want 0", run.InFlight())
			}
		})
	}
}
