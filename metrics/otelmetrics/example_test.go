package otelmetrics_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/metrics/otelmetrics"
)

// A bulkhead of two slots, exported through an SDK MeterProvider with a
// manual reader; in a service the reader is a periodic exporter's.
func Example() {
	rdr := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rdr))
	defer mp.Shutdown(context.Background())

	reg := otelmetrics.New(mp)
	defer reg.Close() // unregisters the callbacks

	slots, err := bulkhead.New(2)
	if err != nil {
		panic(err)
	}
	if err := reg.AddBulkhead("inflight", slots); err != nil {
		panic(err)
	}
	p, _ := slots.TryAcquire()
	defer p.Release()

	var rm metricdata.ResourceMetrics
	if err := rdr.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "levee.inflight" {
			pt := m.Data.(metricdata.Sum[int64]).DataPoints[0]
			name, _ := pt.Attributes.Value("levee.name")
			fmt.Printf("%s{levee.name=%s} = %d %s\n", m.Name, name.AsString(), pt.Value, m.Unit)
		}
	}
	// Output:
	// levee.inflight{levee.name=inflight} = 1 {call}
}
