package metrics_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/metrics"
	"github.com/levee-go/levee/ratelimit"
)

// printSeries GETs url and prints the exposition lines that start with one
// of prefixes.
func printSeries(url string, prefixes ...string) {
	resp, err := http.Get(url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		for _, p := range prefixes {
			if strings.HasPrefix(sc.Text(), p) {
				fmt.Println(sc.Text())
				break
			}
		}
	}
}

// A server protected by a token bucket scaled by CPU load shedding and a
// bulkhead, exported on /metrics.
func Example() {
	monitor := must(cpu.NewManual()) // in a server: cpu.NewMonitor(src) from cpu.Detect()
	global := must(ratelimit.NewLimiter(100, 10))
	shed := must(loadshed.New(loadshed.Step{}, []loadshed.Target{global}))
	slots := must(bulkhead.New(8))
	guards, err := grpcguard.New([]decide.Rule{{
		Name:    "allocate",
		Methods: []string{"/corecart.inventory.v1.InventoryService/Allocate"},
		Guards: []admission.Guard{
			ratelimit.NewGuard("global", global),
			bulkhead.NewGuard("slots", slots, 0),
		},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}

	reg := metrics.New()
	for _, err := range []error{
		reg.AddServer(guards),
		reg.AddCPU(monitor),
		reg.AddScale("cpu", shed),
		reg.AddLimiter("global", global),
		reg.AddBulkhead("slots", slots),
	} {
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", reg.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// One call; then the CPU saturates and the Step controller scales the
	// bucket to 0.2 of its rate.
	unary := guards.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/corecart.inventory.v1.InventoryService/Allocate"}
	unary(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, nil })
	now := time.Now()
	monitor.Update(now, 0.95)
	shed.Observe(now, monitor.Utilization(), monitor.Saturated())

	printSeries(srv.URL+"/metrics",
		`levee_decisions_total{guard="global"`, "levee_cpu_saturated", "levee_loadshed_scale",
		"levee_limit_rate", "levee_inflight", `levee_bulkhead_calls_total{name="slots",result="admitted"}`)
	// Output:
	// levee_bulkhead_calls_total{name="slots",result="admitted"} 1
	// levee_cpu_saturated 1
	// levee_decisions_total{guard="global",result="admitted",rule="allocate"} 1
	// levee_decisions_total{guard="global",result="refused",rule="allocate"} 0
	// levee_decisions_total{guard="global",result="shadow_refused",rule="allocate"} 0
	// levee_inflight{name="slots"} 0
	// levee_limit_rate{name="global"} 20
	// levee_loadshed_scale{name="cpu"} 0.2
}

// Names are unique per kind of guard: a second bulkhead "slots" is refused
// with an error, not a panic.
func ExampleRegistry_AddBulkhead() {
	reg := metrics.New()
	if err := reg.AddBulkhead("slots", must(bulkhead.New(4))); err != nil {
		fmt.Println(err)
		return
	}
	err := reg.AddBulkhead("slots", must(bulkhead.New(4)))
	fmt.Println(errors.Is(err, metrics.ErrDuplicate))
	fmt.Println(err)
	// Output:
	// true
	// metrics: already registered: AddBulkhead("slots"): a bulkhead named "slots" is already registered
}

// Register serves a collector of the caller's own beside levee's series.
func ExampleRegistry_Register() {
	reg := metrics.New()
	wasted := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "inventory_wasted_calls_total",
		Help: "Calls whose handler finished after the caller's deadline.",
	})
	if err := reg.Register(wasted); err != nil {
		fmt.Println(err)
		return
	}
	wasted.Add(3)
	srv := httptest.NewServer(reg.Handler())
	defer srv.Close()
	printSeries(srv.URL, "inventory_")
	// Output:
	// inventory_wasted_calls_total 3
}
