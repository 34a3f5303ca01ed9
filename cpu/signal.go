package cpu

// Signal is the CPU signal that levee's guards follow: how busy the CPU
// this process may use is, and whether it is saturated. *Monitor is one;
// so is a fake in a test, or a signal of your own (the CPU of a sidecar,
// a saturation gated on a standing queue). runlimit, loadshed, the
// preset (protect.WithCPU), a policy file (policy.WithCPU), the ORCA
// load reports (grpcguard.WithORCACPU) and the debug page (statuspage)
// take it.
//
// Its methods are called on the guards' paths and their goroutines: they
// must be cheap (an atomic load, as *Monitor's are) and safe for
// concurrent use.
type Signal interface {
	// Utilization is the smoothed utilisation, a fraction in [0, 1] of
	// the CPU the process may use. A signal that measures none returns
	// 0; the guards that read it then follow Saturated alone.
	Utilization() float64
	// Saturated reports whether the CPU is saturated: a state with
	// hysteresis, kept for a while after the utilisation falls (see
	// Monitor).
	Saturated() bool
}

// ThresholdSignal is a Signal that also tells the utilisation at which
// it saturates (Threshold, a fraction in (0, 1]); *Monitor is one. The
// run limit then judges the utilisation against it for evidence of
// overload, rather than Saturated alone (see runlimit.WithCPU), and the
// debug page shows the utilisation against it.
type ThresholdSignal interface {
	Signal
	Threshold() float64
}

// A Monitor is the signal the guards follow by default.
var _ ThresholdSignal = (*Monitor)(nil)
