package main

import (
	"fmt"
	"time"

	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/metrics"
	"github.com/levee-go/levee/protect"
)

// Recipes of `levee serve -recipe` and `levee demo -recipe`.
const (
	recipePreset = "preset" // protect.New: the library's preset, nothing to give
	recipeStatic = "static" // a fixed chain sized from a capacity (policy.go), for comparison
	// recipeStaticOld is static's former name, still accepted with a
	// notice. Deprecated: use recipeStatic.
	recipeStaticOld = "firstwave"
)

// recipeNamed returns the recipe name names, after a one-line notice on
// stderr for the deprecated name, or a usage error.
func (c *cli) recipeNamed(name string) (string, error) {
	switch name {
	case recipePreset, recipeStatic:
		return name, nil
	case recipeStaticOld:
		fmt.Fprintf(c.stderr, "levee: -recipe %s is deprecated and will be removed: use -recipe %s\n", recipeStaticOld, recipeStatic)
		return recipeStatic, nil
	}
	return "", usageError("-recipe must be %s or %s, got %q", recipePreset, recipeStatic, name)
}

// presetProtection is what `levee serve` runs by default: the library's
// preset, whose numbers are learned. A capacity given with -capacity is
// only an upper bound on the calls/s admitted.
func presetProtection(p policyParams) (protection, error) {
	var popts []protect.Option
	if p.Capacity > 0 {
		popts = append(popts, protect.WithMaxRate(p.Capacity))
	}
	if p.TenantHeader != "" {
		popts = append(popts, protect.WithTenants(decide.HeaderKey(p.TenantHeader), nil))
	}
	if p.Fleet != nil {
		popts = append(popts, p.Fleet.options()...)
	}
	if p.NoMemoryGuard {
		popts = append(popts, protect.WithoutMemory())
	}
	pr, err := protect.New(append(popts, p.PresetOptions...)...)
	if err != nil {
		return protection{}, err
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
			return protection{}, err
		}
		p.Mux.Handle("/metrics", reg.Handler())
		p.Mux.Handle(debugPath, pr.DebugHandler())
	}
	return protection{grpc: pr.ServerOptions(), engine: pr.Engine(), stop: pr.Stop, preset: pr}, nil
}
