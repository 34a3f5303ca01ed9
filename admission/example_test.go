package admission_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/ratelimit"
)

// maintenance is a guard of one's own: while on, it refuses the calls of
// the methods it names. The engine orders, counts and finishes it exactly
// as a built-in guard that declares the same Traits.
type maintenance struct {
	on      atomic.Bool
	methods map[string]bool
}

func (m *maintenance) Name() string { return "maintenance" }

func (m *maintenance) Admit(c admission.Call) admission.Decision {
	if m.on.Load() && m.methods[c.Method] {
		return admission.Refuse("down for maintenance", time.Minute)
	}
	return admission.Decision{} // admitted, holding nothing
}

func (m *maintenance) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// Traits: one atomic load, as cheap as a hold-off, so it runs before the
// token bucket; its Finish reads nothing, so no call needs the clock or
// a Finish for it.
func (m *maintenance) Traits() admission.Traits {
	return admission.Traits{Cost: admission.CostHoldOff, IgnoresDuration: true, FinishesSkippedOnly: true}
}

// A guard of your own beside a built-in one in a Chain. In a gRPC server
// the same guard goes into the preset with protect.WithGuard(m), or into a
// rule of grpcguard.New.
func ExampleGuard() {
	m := &maintenance{methods: map[string]bool{"/shop.Cart/Checkout": true}}
	lim, err := ratelimit.NewLimiter(100, 10)
	if err != nil {
		log.Fatal(err)
	}
	ch, err := admission.NewChain("shop", []admission.Guard{ratelimit.NewGuard("rate", lim), m})
	if err != nil {
		log.Fatal(err)
	}
	for i := range ch.Len() {
		fmt.Printf("guard %d: %s\n", i, ch.Guard(i).Name())
	}

	call := func(method string) {
		var c admission.Call
		c.Init(context.Background(), method, time.Now())
		var ps admission.Permits
		if i, d := ch.Enter(&c, &ps); i >= 0 {
			fmt.Printf("%s: refused by %s: %s, retry after %v\n", method, ch.Guard(i).Name(), d.Reason, d.RetryAfter)
			return
		}
		fmt.Printf("%s: admitted\n", method)
		ch.Finish(&c, &ps, admission.Outcome{}) // every admitted call is finished once
	}
	call("/shop.Cart/Checkout")
	m.on.Store(true)
	call("/shop.Cart/Checkout")
	call("/shop.Cart/View")

	for _, s := range ch.Stats() {
		fmt.Printf("%s: admitted %d, refused %d\n", s.Guard, s.Admitted, s.Refused)
	}
	// Output:
	// guard 0: maintenance
	// guard 1: rate
	// /shop.Cart/Checkout: admitted
	// /shop.Cart/Checkout: refused by maintenance: down for maintenance, retry after 1m0s
	// /shop.Cart/View: admitted
	// maintenance: admitted 2, refused 1
	// rate: admitted 2, refused 0
}
