package loadgen

import (
	"fmt"
	"time"
)

// startProgress starts the goroutine that writes a progress line every
// second and returns the function that stops it and waits for it.
func (r *run) startProgress() (stop func()) {
	r.progressOut = r.g.opts.progress
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-r.g.clock.After(time.Second):
				r.writeProgress(false)
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// writeProgress writes one line with what happened since the last line:
// requests offered, and outcomes by completion time. final marks the
// summary line written when the run ends.
func (r *run) writeProgress(final bool) {
	now := [6]int64{r.offered.Load(), r.succeeded.Load(), r.refused.Load(), r.timedOut.Load(), r.failed.Load(), r.dropped.Load()}
	var d [6]int64
	for i := range now {
		d[i] = now[i] - r.lastProgress[i]
	}
	r.lastProgress = now
	elapsed := min(r.g.clock.Now().Sub(r.start), r.total)
	// Name the phase of the second the line reports on.
	phase := r.phaseAt(max(elapsed-time.Second/2, 0))
	elapsed = elapsed.Truncate(time.Second)
	if final {
		how, ran := "done", r.total
		if r.ran < r.total {
			how, ran = "interrupted after", r.ran.Round(time.Millisecond)
		}
		fmt.Fprintf(r.progressOut, "loadgen: %s %v  offered %d  ok %d  refused %d  timed out %d  failed %d  dropped %d\n",
			how, ran, now[0], now[1], now[2], now[3], now[4], now[5])
		return
	}
	fmt.Fprintf(r.progressOut, "loadgen: %4v %-10s offered %5d/s  ok %5d  refused %5d  timed out %5d  failed %4d  dropped %4d  in flight %5d\n",
		elapsed, phase, d[0], d[1], d[2], d[3], d[4], d[5], r.inFlight.Load())
}

// phaseAt returns the name of the phase scheduled at offset at.
func (r *run) phaseAt(at time.Duration) string {
	var end time.Duration
	for _, p := range r.g.phases {
		end += p.Duration
		if at < end {
			return p.Name
		}
	}
	return r.g.phases[len(r.g.phases)-1].Name
}
