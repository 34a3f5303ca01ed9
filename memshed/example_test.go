package memshed_test

import (
	"context"
	"fmt"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/memshed"
)

// pressure is a memory signal fixed for the example; in a server it is a
// *memory.Monitor.
type pressure struct{ projected float64 }

func (p *pressure) Projected() float64       { return p.projected }
func (p *pressure) HardUtilization() float64 { return p.projected }
func (p *pressure) HardLimit() uint64        { return 0 }
func (p *pressure) GCFraction() float64      { return 0.05 }
func (p *pressure) Limited() bool            { return true }

// A shedder admits everything until memory pressure appears; then it
// keeps the memory the running calls hold under a budget, lowest class
// first. In a server it sits in the preset's chain after the run limit
// (protect.New adds it when the process has a memory limit).
func Example() {
	sig := &pressure{projected: 0.5}
	s, err := memshed.NewManual("memory", sig)
	if err != nil {
		panic(err)
	}
	type running struct {
		c admission.Call
		p admission.Permit
	}
	start := func(class admission.Criticality) (running, bool) {
		var c admission.Call
		c.Init(context.Background(), "/shop.Cart/Checkout", time.Now())
		c.Class = class
		if d := s.Admit(c); d.Refused {
			return running{}, false
		}
		d := s.Start(c, admission.Permit{})
		return running{c, d.Permit}, !d.Refused
	}
	now := time.Now()
	s.Tick(now)
	var calls []running
	for range 10 {
		r, _ := start(admission.Critical) // ten calls running, holding memory
		calls = append(calls, r)
	}
	sig.projected = 0.95 // the heap heads for the limit
	s.Tick(now.Add(100 * time.Millisecond))
	fmt.Println("budget set:", s.Budget() > 0)
	_, ok := start(admission.Critical)
	fmt.Println("critical admitted at the budget:", ok)
	for _, r := range calls[:3] { // three calls finish
		s.Finish(r.c, r.p, admission.Outcome{})
	}
	_, ok = start(admission.Sheddable)
	fmt.Println("sheddable admitted:", ok)
	for _, r := range calls[3:] { // the others finish: nothing holds memory
		s.Finish(r.c, r.p, admission.Outcome{})
	}
	_, ok = start(admission.Critical)
	fmt.Println("critical admitted:", ok)
	// Output:
	// budget set: true
	// critical admitted at the budget: false
	// sheddable admitted: false
	// critical admitted: true
}
