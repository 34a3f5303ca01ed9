package redislimit_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/rueidis"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/redislimit"
)

// A tenant's 1000 calls/s, bursts of 100, shared by every replica that
// runs this code against the same Redis (or Redis Cluster: give all its
// nodes).
func ExampleNew() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lim, err := redislimit.New(client, "orders", 1000, 100)
	if err != nil {
		log.Fatal(err) // a bad value is an error naming it, never a panic
	}
	defer lim.Close() // stops the heartbeat goroutine

	r := lim.Allow(context.Background(), "tenant-acme")
	if !r.Allowed {
		log.Printf("refused: retry in %v (local fallback: %v)", r.RetryAfter, r.Local)
	}
}

// With leases Redis leaves the request path: each replica takes tokens in
// batches covering 250 ms of its own traffic, and a call admitted from a
// lease costs one atomic add.
func ExampleWithLeases() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lim, err := redislimit.New(client, "orders", 1000, 100,
		redislimit.WithLeases(100*time.Millisecond, time.Second),
		redislimit.WithTimeout(50*time.Millisecond), // past it, the local fallback decides
	)
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	_ = lim.Allow(context.Background(), "tenant-acme")
}

// The limiter as a guard in a rule: one bucket per tenant and method,
// after the local guards.
func ExampleNewGuard() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lim, err := redislimit.New(client, "api", 1000, 100, redislimit.WithLeases(redislimit.DefaultLeaseHorizon, redislimit.DefaultLeaseTTL))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	chain, err := admission.NewChain("api", []admission.Guard{
		redislimit.NewGuard("fleet", lim, redislimit.ByKey|redislimit.ByMethod),
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = chain // decide.Rule{Key: decide.HeaderKey("x-tenant-id"), Guards: ...} runs the same guards
}
