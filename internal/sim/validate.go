package sim

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Validate reports every field of sh that Run cannot simulate, each named:
// negative durations, counts and loads (and loads that are not numbers);
// fewer than one processor; a call that costs no CPU (its capacity would
// be infinite, its arrivals endless at one instant); a Draw without its
// MeanCPU; and closed-loop callers whose refused calls cost no time and
// are sent again without a Backoff, which would loop at one virtual
// instant for ever. It returns nil for a shape Run can simulate, such as
// every shape of this package.
func (sh Shape) Validate() error {
	v := &validation{name: sh.Name}
	sh.validateFields(v)
	if len(v.errs) == 0 {
		sh.validateRun(v)
	}
	sh.validatePhases(v)
	return errors.Join(v.errs...)
}

// validation collects the errors of a Shape's Validate.
type validation struct {
	name string
	errs []error
}

// bad notes that field must be want, and is got.
func (v *validation) bad(field, want string, got any) {
	v.errs = append(v.errs, fmt.Errorf("sim: Shape %q: %s must be %s, got %v", v.name, field, want, got))
}

// duration checks that d, of field, is >= 0.
func (v *validation) duration(field string, d time.Duration) {
	if d < 0 {
		v.bad(field, ">= 0", d)
	}
}

// count checks that n, of field, is >= 0.
func (v *validation) count(field string, n int) {
	if n < 0 {
		v.bad(field, ">= 0", n)
	}
}

// number checks that f, of field, is a finite number >= 0.
func (v *validation) number(field string, f float64) {
	if !(f >= 0 && !math.IsInf(f, 1)) {
		v.bad(field, "a number >= 0", f)
	}
}

// share checks that f, of field, is in [0, 1].
func (v *validation) share(field string, f float64) {
	if !(f >= 0 && f <= 1) {
		v.bad(field, "in [0, 1]", f)
	}
}

// validateFields checks each field of sh on its own.
func (sh Shape) validateFields(v *validation) {
	if sh.Procs < 1 {
		v.bad("Procs", ">= 1", sh.Procs)
	}
	for _, d := range []struct {
		field string
		d     time.Duration
	}{
		{"Costs.Read", sh.Costs.Read}, {"Costs.Refuse", sh.Costs.Refuse}, {"Costs.Start", sh.Costs.Start},
		{"Costs.Write", sh.Costs.Write}, {"CPU", sh.CPU}, {"MeanCPU", sh.MeanCPU}, {"Query", sh.Query},
		{"SlowAt", sh.SlowAt}, {"OthersAt", sh.OthersAt}, {"CallersFor", sh.CallersFor}, {"Backoff", sh.Backoff},
		{"ColdFor", sh.ColdFor}, {"Clumps", sh.Clumps}, {"SteadyCPU", sh.SteadyCPU}, {"Deadline", sh.Deadline}, {"ClientCPU", sh.ClientCPU},
	} {
		v.duration(d.field, d.d)
	}
	for _, n := range []struct {
		field string
		n     int
	}{
		{"Conns", sh.Conns}, {"SlowConns", sh.SlowConns}, {"Others", sh.Others}, {"Callers", sh.Callers}, {"Messages", sh.Messages}, {"Clump", sh.Clump},
	} {
		v.count(n.field, n.n)
	}
	v.number("SlowBy", sh.SlowBy)
	v.number("Cold", sh.Cold)
	v.number("SteadyRate", sh.SteadyRate)
	v.number("ClientRate", sh.ClientRate)
	v.share("Share", sh.Share)
	if sh.SlowConns > 0 && sh.Conns == 0 {
		v.bad("SlowConns", "0 without Conns", sh.SlowConns)
	}
	if sh.ClientCPU > 0 && sh.Others > 0 {
		v.bad("ClientCPU", "0 with Others", sh.ClientCPU)
	}
	if sh.Draw != nil && sh.MeanCPU <= 0 {
		v.bad("MeanCPU", "> 0 with a Draw", sh.MeanCPU)
	}
	if sh.Memory != nil {
		sh.Memory.validate(v)
	}
}

// validateRun checks that a run of sh, its fields valid, moves on in
// virtual time: a call costs CPU, and closed-loop callers refused
// without a Backoff are refused at a cost.
func (sh Shape) validateRun(v *validation) {
	if sh.CPUPerCall() <= 0 {
		v.bad("CPU", "> 0, or Costs that cost CPU, for a call to cost CPU", sh.CPU)
	}
	if k := sh.costs(); sh.Callers > 0 && sh.Backoff == 0 && k.Read+k.Refuse <= 0 {
		v.bad("Backoff", "> 0 for Callers whose refusals cost no time (Costs.Read+Costs.Refuse 0)", sh.Backoff)
	}
}

// validatePhases checks Phases and Sources.
func (sh Shape) validatePhases(v *validation) {
	for i, ph := range sh.Phases {
		v.duration(fmt.Sprintf("Phases[%d].Duration", i), ph.Duration)
		v.number(fmt.Sprintf("Phases[%d].Load", i), ph.Load)
		v.count(fmt.Sprintf("Phases[%d].Clump", i), ph.Clump)
	}
	for i, src := range sh.Sources {
		v.number(fmt.Sprintf("Sources[%d].Load", i), src.Load)
		v.share(fmt.Sprintf("Sources[%d].Share", i), src.Share)
		v.duration(fmt.Sprintf("Sources[%d].From", i), src.From)
	}
}
