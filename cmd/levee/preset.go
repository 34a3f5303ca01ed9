package main

import (
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/metrics"
	"github.com/levee-go/levee/protect"
)

// Recipes of `levee serve -recipe`.
const (
	recipePreset    = "preset"    // protect.New: the library's preset, nothing to give
	recipeFirstWave = "firstwave" // the first wave's hand-sized recipe (policy.go), for comparison
)

// presetProtection is what `levee serve` runs by default: the library's
// preset, whose numbers are learned. A capacity given with -capacity is
// only an upper bound on the calls/s admitted.
func presetProtection(p policyParams) (opts []grpc.ServerOption, stop func(), err error) {
	var popts []protect.Option
	if p.Capacity > 0 {
		popts = append(popts, protect.WithMaxRate(p.Capacity))
	}
	if p.TenantHeader != "" {
		popts = append(popts, protect.WithTenants(grpcguard.HeaderKey(p.TenantHeader), nil))
	}
	if p.Fleet != nil {
		popts = append(popts, p.Fleet.options()...)
	}
	if p.NoMemoryGuard {
		popts = append(popts, protect.WithoutMemory())
	}
	pr, err := protect.New(popts...)
	if err != nil {
		return nil, func() {}, err
	}
	if p.Fleet != nil {
		p.Fleet.bind(pr)
	}
	if p.Gauges != nil {
		run := pr.RunLimit()
		p.Gauges.Set("limit", func() float64 { return float64(run.Limit()) })
		p.Gauges.Set("waiting", func() float64 { return float64(run.Waiting()) })
		guard := pr.Guard()
		p.Gauges.Set("tap_pending", func() float64 {
			n, _ := guard.TapLeftovers(time.Now())
			return float64(n)
		})
		if mon := pr.Memory(); mon != nil {
			p.Gauges.Set("memory_projected", mon.Projected)
		}
		if ms := pr.MemoryGuard(); ms != nil {
			p.Gauges.Set("memshed_refused", func() float64 { return float64(ms.Refused()) })
			p.Gauges.Set("memshed_budget", func() float64 { return float64(ms.Budget()) })
		}
	}
	if p.Mux != nil {
		reg := metrics.New(metrics.WithRuntimeMetrics())
		err := pr.Register(reg)
		if err == nil && p.Fleet != nil {
			err = p.Fleet.register(reg)
		}
		if err != nil {
			pr.Stop()
			return nil, func() {}, err
		}
		p.Mux.Handle("/metrics", reg.Handler())
	}
	return pr.ServerOptions(), pr.Stop, nil
}
