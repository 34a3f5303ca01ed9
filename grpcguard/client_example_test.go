package grpcguard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/breaker"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/ratelimit"
)

// A Client installed on a connection: per downstream a token bucket, per
// method a circuit breaker. Once the breaker has
// seen enough failures, calls fail at once with UNAVAILABLE and never
// leave the process.
func ExampleNewClient() {
	guard, err := grpcguard.NewClient(
		grpcguard.WithTargetLimit(100, 20), // 100 calls/s to each downstream, bursts of 20
		grpcguard.WithBreaker(func(target, method string) []breaker.Option {
			return []breaker.Option{breaker.WithCountWindow(5), breaker.WithMinimumCalls(5), breaker.WithWaitInOpen(30 * time.Second)}
		}),
		// The throttle's drops are random; this example shows the breaker
		// alone. By default each method has a throttle with K = 2.
		grpcguard.WithThrottle(nil),
	)
	if err != nil {
		log.Fatal(err)
	}
	// grpc.NewClient does not connect until the first call is sent.
	conn, err := grpc.NewClient("passthrough:///inventory:50051",
		append(guard.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	// Here the downstream is down: an invoker standing for the network
	// answers every call it is given with UNAVAILABLE.
	sent := 0
	down := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		sent++
		return status.Error(codes.Unavailable, "connection refused")
	}
	unary := guard.UnaryClientInterceptor()
	for range 8 {
		err = unary(context.Background(), "/corecart.inventory.v1.InventoryService/GetStock", nil, nil, conn, down)
	}
	fmt.Println("sent:", sent)
	fmt.Println("last call:", status.Code(err), errors.Is(err, grpcguard.ErrClientRefused), errors.Is(err, breaker.ErrOpen))
	fmt.Println(status.Convert(err).Message())
	// Output:
	// sent: 5
	// last call: Unavailable true true
	// levee: client breaker: circuit breaker open (passthrough:///inventory:50051)
}

// Per-downstream limits of different sizes, as in seed 004: each target
// gets the bucket its function returns.
func ExampleWithTargetLimiter() {
	limits := map[string]ratelimit.Limit{"dns:///payments:443": 50, "dns:///search:443": 500}
	guard, err := grpcguard.NewClient(grpcguard.WithTargetLimiter(func(target string) *ratelimit.Limiter {
		if r, ok := limits[target]; ok {
			return must(ratelimit.NewLimiter(r, int(r)/10))
		}
		return nil // no limit for other targets
	}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(guard.DialOptions()), "dial options")
	// Output: 2 dial options
}

// An application that knows one of its errors means overload says so with
// a classifier. Here the inventory server answers ABORTED "inventory:
// database pool exhausted" when its connection pool is full: for its
// callers that is overload, while its other answers, UNKNOWN included,
// stay accepts as ClassifyError has them.
func ExampleWithClassifier() {
	classify := func(err error) breaker.Outcome {
		if st, ok := status.FromError(err); ok && st.Code() == codes.Aborted &&
			strings.HasPrefix(st.Message(), "inventory: database pool exhausted") {
			return breaker.Failure
		}
		return grpcguard.ClassifyError(err) // local refusals stay ignored
	}
	guard, err := grpcguard.NewClient(grpcguard.WithClassifier(classify))
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient("passthrough:///inventory:50051",
		append(guard.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	// An invoker standing for the network gives the server's answers.
	answers := []error{
		nil,
		status.Error(codes.Unknown, "inventory: nil map"), // a handler's plain Go error
		status.Error(codes.Aborted, "inventory: order changed, retry the transaction"),
		status.Error(codes.Aborted, "inventory: database pool exhausted"),
	}
	const method = "/corecart.inventory.v1.InventoryService/Allocate"
	unary := guard.UnaryClientInterceptor()
	for _, answer := range answers {
		_ = unary(context.Background(), method, nil, nil, conn,
			func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return answer })
	}
	th := guard.Throttle(conn.Target(), method).Snapshot()
	br := guard.Breaker(conn.Target(), method).Snapshot()
	fmt.Printf("throttle: %d requests, %d accepted\n", th.Requests, th.Accepts)
	fmt.Printf("breaker: %d successes, %d failures\n", br.Successes, br.Failures)
	// Output:
	// throttle: 4 requests, 3 accepted
	// breaker: 3 successes, 1 failures
}
