package grpcguard_test

import (
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
)

// A guarded server that publishes its load in ORCA reports: out of band
// (Register) and in every call's trailer (WithORCAPerCall). The
// application utilisation is the calls in the server over the bulkhead's
// limit; give WithORCACPU a *cpu.Monitor to report the CPU too.
func ExampleNewORCA() {
	slots := must(bulkhead.NewAdaptive())
	guard := must(grpcguard.New([]decide.Rule{{
		Guards: []admission.Guard{bulkhead.NewAdaptiveGuard("inflight", slots, 5*time.Millisecond)},
	}}))
	reports, err := grpcguard.NewORCA(guard, grpcguard.WithORCACapacity(slots), grpcguard.WithORCAPerCall())
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := grpc.NewServer(reports.ServerOptions()...) // in place of guard.ServerOptions()
	defer srv.Stop()
	if err := reports.Register(srv); err != nil { // the out-of-band service
		fmt.Println(err)
		return
	}
	l := reports.Load()
	fmt.Println(l.CPU, l.Application, l.QPS, l.EPS)
	// Output:
	// -1 0 0 0
}

// A bad option is an error that names it.
func ExampleNewORCA_error() {
	guard := must(grpcguard.New([]decide.Rule{{Guards: []admission.Guard{bulkhead.NewGuard("inflight", must(bulkhead.New(8)), 0)}}}))
	_, err := grpcguard.NewORCA(guard, grpcguard.WithORCAWindow(0), grpcguard.WithORCAMinInterval(time.Second))
	fmt.Println(err)
	// Output:
	// grpcguard: WithORCAWindow: window must be > 0, got 0s
	// grpcguard: WithORCAMinInterval: interval must be >= 30s (grpc-go's least), got 1s
}
