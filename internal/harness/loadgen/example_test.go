package loadgen_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func Example() {
	// A stand-in for a gRPC call: every third request is refused.
	var n atomic.Int64
	call := func(ctx context.Context) error {
		if n.Add(1)%3 == 0 {
			return status.Error(codes.ResourceExhausted, "busy")
		}
		return nil
	}
	gen, err := loadgen.New(call, []loadgen.Phase{
		{Name: "warm", Duration: 100 * time.Millisecond, Rate: 60},
		{Name: "busy", Duration: 100 * time.Millisecond, Rate: 150},
	}, loadgen.WithDeadline(time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := gen.Run(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range res.Phases {
		fmt.Printf("%s: offered %d\n", p.Name, p.Offered)
	}
	fmt.Printf("total: succeeded %d, refused %v\n", res.Total.Succeeded, res.Total.Refused)
	// Output:
	// warm: offered 6
	// busy: offered 15
	// total: succeeded 14, refused map[ResourceExhausted:7]
}

func ExampleNew_badPhase() {
	_, err := loadgen.New(func(context.Context) error { return nil },
		[]loadgen.Phase{{Name: "spike", Duration: -time.Second, Rate: 100}})
	fmt.Println(err)
	// Output:
	// loadgen: invalid argument: phase 0 "spike": duration must be > 0, got -1s
}
