package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/levee-go/levee/cmd/levee/internal/scenario"
)

// TestServeSecondSignalEndsGracefulStop: a second Ctrl-C while levee
// serve stops gracefully ends it at once, as it ends levee load and levee
// demo. The graceful stop waits up to shutdownGrace for the calls still
// running; here a health Watch stream (a load balancer's) holds it that
// long. The second signal was caught and ignored, and the server exited
// 0 when the grace ran out.
func TestServeSecondSignalEndsGracefulStop(t *testing.T) {
	c, _, stderr := testCLI(t)
	srv, err := scenario.StartServer(context.Background(), c.env(), -1, "-unprotected", "-work-iterations", "0")
	if err != nil {
		t.Fatalf("StartServer() error = %v; stderr:\n%s", err, stderr)
	}
	defer srv.Stop(0) // kills it if it still runs
	cc, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watch, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := watch.Recv(); err != nil || st.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health Watch = %v, %v; want SERVING", st, err)
	}

	if err := srv.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The graceful stop reports NOT_SERVING first: it has begun.
	if st, err := watch.Recv(); err != nil || st.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health Watch after SIGTERM = %v, %v; want NOT_SERVING", st, err)
	}
	// Ctrl-C, repeated until the process ends by a signal: the first may
	// still reach the handler of the first signal. A clean exit leaves
	// Err nil, and the loop runs out.
	start := time.Now()
	for srv.Err() == nil && time.Since(start) < shutdownGrace+2*time.Second {
		_ = srv.Signal(os.Interrupt) // fails once the process has ended
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(srv.Err(), &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("levee serve ended %v after its second signal, exit error %v; want ended by the signal, at once (the graceful stop waits up to %v)", took.Round(time.Millisecond), srv.Err(), shutdownGrace)
	}
	if took > shutdownGrace/2 {
		t.Errorf("levee serve took %v to end after its second signal, want at once", took)
	}
}
