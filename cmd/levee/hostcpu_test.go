package main

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// hostCPU samples the whole machine's CPU time from /proc/stat while a
// test runs, so that a test whose server did little can tell a server
// starved of its CPU (time stolen by the hypervisor, other processes)
// from one that idled with work to do. Where /proc/stat cannot be read
// it records nothing.
type hostCPU struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	log  []string
}

// startHostCPU samples every 250ms until stopped (Stop).
func startHostCPU() *hostCPU {
	h := &hostCPU{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		start := time.Now()
		prev, ok := readProcStat()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
			cur, ok2 := readProcStat()
			if ok && ok2 {
				var d [8]float64
				var total float64
				for i := range d {
					d[i] = float64(cur[i] - prev[i])
					total += d[i]
				}
				if total > 0 {
					h.mu.Lock()
					h.log = append(h.log, "at "+time.Since(start).Round(time.Millisecond).String()+": user "+pct2(d[0]+d[1], total)+
						", system "+pct2(d[2]+d[5]+d[6], total)+", idle "+pct2(d[3]+d[4], total)+", stolen "+pct2(d[7], total))
					h.mu.Unlock()
				}
			}
			prev, ok = cur, ok2
		}
	}()
	return h
}

// Stop ends the sampling and waits for it.
func (h *hostCPU) Stop() {
	close(h.stop)
	<-h.done
}

// Log writes the samples to t: the machine's CPU time by kind, as % of
// all its CPUs, each 250ms.
func (h *hostCPU) Log(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.log {
		t.Logf("host CPU %s", l)
	}
}

// readProcStat returns the first eight fields of /proc/stat's cpu line
// (user, nice, system, idle, iowait, irq, softirq, steal), in ticks.
func readProcStat() ([8]uint64, bool) {
	var v [8]uint64
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return v, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return v, false
	}
	for i := range v {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func pct2(part, total float64) string {
	return strconv.FormatFloat(100*part/total, 'f', 0, 64) + "%"
}

// TestHostCPUSamples checks that the sampler records, on a machine with
// /proc/stat, a sample per 250ms whose kinds are named, and stops.
func TestHostCPUSamples(t *testing.T) {
	if _, ok := readProcStat(); !ok {
		t.Log("no /proc/stat here: the sampler records nothing, as documented")
		h := startHostCPU()
		time.Sleep(300 * time.Millisecond)
		h.Stop()
		if len(h.log) != 0 {
			t.Errorf("samples %q without /proc/stat, want none", h.log)
		}
		return
	}
	h := startHostCPU()
	time.Sleep(600 * time.Millisecond)
	h.Stop()
	if len(h.log) < 1 {
		t.Fatalf("no sample in 600ms, want about two")
	}
	for _, l := range h.log {
		if !strings.Contains(l, "user ") || !strings.Contains(l, "stolen ") {
			t.Errorf("sample %q, want user … stolen …", l)
		}
	}
	h.Log(t)
}
