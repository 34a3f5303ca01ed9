package grpcguard_test

import (
	"fmt"
	"runtime"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/queuedelay"
	"github.com/levee-go/levee/ratelimit"
)

// A server protected at the transport: calls that cannot meet their
// deadline, that queued too long, that exceed the global or the client's
// rate, or that find every slot taken are refused before their handler.
func ExampleNew() {
	perClient := must(ratelimit.NewKeyed(100, 20))
	defer perClient.Close()
	dl, err := deadline.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	queue, err := queuedelay.New(20*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		fmt.Println(err)
		return
	}
	guard, err := grpcguard.New([]decide.Rule{{
		Methods: []string{"/corecart.inventory.v1.InventoryService/Allocate"},
		Key:     decide.PeerKey(),
		Guards: []admission.Guard{
			dl,
			queue,
			ratelimit.NewGuard("global", must(ratelimit.NewLimiter(1000, 100))),
			ratelimit.NewKeyedGuard("client", perClient),
			bulkhead.NewGuard("inflight", must(bulkhead.New(4*runtime.GOMAXPROCS(0))), 5*time.Millisecond),
		},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := grpc.NewServer(guard.ServerOptions()...)
	defer srv.Stop()
	for _, s := range guard.Stats() {
		fmt.Println(s.Rule, s.Guard)
	}
	// Output:
	// /corecart.inventory.v1.InventoryService/Allocate deadline
	// /corecart.inventory.v1.InventoryService/Allocate queue
	// /corecart.inventory.v1.InventoryService/Allocate global
	// /corecart.inventory.v1.InventoryService/Allocate client
	// /corecart.inventory.v1.InventoryService/Allocate inflight
}

// A rule in shadow mode counts what it would refuse and refuses nothing.
func ExampleRule_shadow() {
	_, err := grpcguard.New([]decide.Rule{{
		Shadow: true,
		Guards: []admission.Guard{ratelimit.NewGuard("trial", must(ratelimit.NewLimiter(50, 10)))},
	}})
	fmt.Println(err)
	// Output:
	// <nil>
}

// Bad rules are reported with the rule and pattern at fault.
func ExampleNew_badPattern() {
	_, err := grpcguard.New([]decide.Rule{{
		Name:    "inventory",
		Methods: []string{"InventoryService/Allocate"},
		Guards:  []admission.Guard{ratelimit.NewGuard("rate", must(ratelimit.NewLimiter(10, 1)))},
	}})
	fmt.Println(err)
	// Output:
	// decide: rule "inventory": method pattern "InventoryService/Allocate" is not "/pkg.Service/Method", "/pkg.Service/*" or "*"
}
