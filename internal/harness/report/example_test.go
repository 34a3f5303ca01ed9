package report_test

import (
	"os"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
)

func ExampleWriteTable() {
	res := &loadgen.Result{
		Duration: 10 * time.Second,
		Phases: []loadgen.PhaseResult{{
			Phase: loadgen.Phase{Name: "spike", Duration: 10 * time.Second, Rate: 2000},
			Stats: loadgen.Stats{
				Offered:   20000,
				Succeeded: 1950,
				Refused:   map[string]int64{"ResourceExhausted": 18050},
				Success:   loadgen.Latency{Count: 1950, P50: 5 * time.Millisecond, P90: 6 * time.Millisecond, P99: 8 * time.Millisecond, P999: 9 * time.Millisecond},
				Refusal:   loadgen.Latency{Count: 18050, P50: 100 * time.Microsecond, P90: 200 * time.Microsecond, P99: 400 * time.Microsecond, P999: 900 * time.Microsecond},
			},
		}},
	}
	c := &report.Comparison{Capacity: 200, Runs: []report.Run{{Name: "protected", Result: res}}}
	if err := report.WriteTable(os.Stdout, c); err != nil {
		panic(err)
	}
	// Output:
	// phase 1/1 "spike": 10s at 2000/s (10.0× capacity of 200/s)
	//                             protected
	//   offered/s                    2000.0
	//   goodput/s                     195.0
	//   goodput % of capacity         97.5%
	//   goodput % of offered           9.8%
	//   succeeded                      1950
	//   refused                       18050
	//     ResourceExhausted           18050
	//   timed out                         0
	//   other errors                      0
	//   dropped by generator              0
	//   success latency p50          5.00ms
	//   success latency p90          6.00ms
	//   success latency p99          8.00ms
	//   success latency p99.9        9.00ms
	//   refusal latency p50          0.10ms
	//   refusal latency p90          0.20ms
	//   refusal latency p99          0.40ms
	//   refusal latency p99.9        0.90ms
	//   generator start lag p99           -
}
