// Tests of five defects of levee load and levee serve: rates of an
// interrupted load over the whole planned phase, -fd-limit silently
// lowered to the hard limit, the -metrics-addr server outliving serve, no
// /metrics with -unprotected, and timing flags silently ignored without
// the flag they tune.

package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLoadInterruptedRatesCoverWhatRan: levee load interrupted during a
// phase says "the report covers the part that ran", and so do its
// per-second figures: a 40/s schedule cut after about 1.5 s of 10 s
// reports about 40 offered/s (what ran over the 1.5 s), not about 6 (over
// the 10 s planned).
func TestLoadInterruptedRatesCoverWhatRan(t *testing.T) {
	_, addr := startInventory(t)
	c, stdout, stderr := testCLI(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(1500*time.Millisecond, cancel)
	code := c.run(ctx, []string{"load", "-target", addr, "-phases", "a:10s:40", "-quiet"})
	if code != exitFail || !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("levee load interrupted: exit %d, stderr %q; want 1 and \"interrupted\"", code, stderr)
	}
	var offered float64 = -1
	for _, line := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "offered/s" {
			offered, _ = strconv.ParseFloat(f[1], 64)
		}
	}
	if offered < 30 {
		t.Errorf("interrupted run at 40/s reports offered/s = %v, want about 40 (the part that ran):\n%s", offered, stdout)
	}
}

// TestServeFDLimitAboveHardLimit: -fd-limit N above the hard limit is not
// silently lowered to the hard limit (the server would run with fewer
// files, and a smaller default -max-conns, than it was told): serve raises
// the hard limit too when it may (a privileged process), or fails with a
// usage error naming -fd-limit. Skipped only where the system has no
// getrlimit.
func TestServeFDLimitAboveHardLimit(t *testing.T) {
	var before syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &before); err != nil {
		if errors.Is(err, syscall.ENOSYS) || errors.Is(err, errors.ErrUnsupported) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &before) })
	want := before.Max + 1000
	c, stdout, stderr := testCLI(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- c.run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-cpu-work", "1ms", "-fd-limit", strconv.FormatUint(want, 10)})
	}()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(stdout.String(), "listening") {
		select {
		case code := <-done:
			if code != exitUsage || !strings.Contains(stderr.String(), "-fd-limit") {
				t.Errorf("serve -fd-limit %d: exit %d, stderr %q; want 2 naming -fd-limit", want, code, stderr)
			}
			return
		case <-deadline:
			t.Fatal("serve neither listened nor exited")
		case <-time.After(5 * time.Millisecond):
		}
	}
	var now syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if now.Cur != want {
		t.Errorf("serve -fd-limit %d started with RLIMIT_NOFILE %d and no word on stderr (%q); want the limit asked for, or a usage error naming -fd-limit", want, now.Cur, stderr)
	}
}

// TestServeMetricsListenerClosedOnReturn: a request still running on
// -metrics-addr (a 10 s CPU profile with -pprof) when levee serve stops
// does not outlive the command: once the graceful shutdown gives up (after
// 1 s) its connection is closed, and the client sees the request end soon
// after serve returned.
func TestServeMetricsListenerClosedOnReturn(t *testing.T) {
	c, stdout, _ := testCLI(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- c.run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-pprof", "-cpu-work", "1ms", "-unprotected"})
	}()
	_, httpAddr := listening(t, stdout, done)
	reqDone := make(chan struct{})
	go func() {
		defer close(reqDone)
		resp, err := http.Get("http://" + httpAddr + "/debug/pprof/profile?seconds=10")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	time.Sleep(300 * time.Millisecond) // the profile is running
	cancel()
	<-done
	returned := time.Now()
	select {
	case <-reqDone:
	case <-time.After(3 * time.Second):
		t.Errorf("the profile request on -metrics-addr was still open %v after serve returned", time.Since(returned).Round(time.Second))
		<-reqDone // let it end, not to leak into other tests
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestServeUnprotectedMetrics: -metrics-addr serves /metrics, as
// documented (DESIGN.md: "/metrics in Prometheus text format on
// -metrics-addr"; the flag's help: "/metrics, /stats and the debug page"),
// with -unprotected too, so that the baseline server can be scraped.
func TestServeUnprotectedMetrics(t *testing.T) {
	_, httpAddr, _ := startServe(t, "-unprotected")
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /metrics of levee serve -unprotected -metrics-addr: %s, want 200", resp.Status)
	}
}

// TestServeDBLatencyWithoutDBConns: -db-latency without -db-conns (which
// would leave the server CPU-bound, the flag ignored) is a usage error
// naming -db-latency, as the fleet flags without -redis and -pprof without
// -metrics-addr are.
func TestServeDBLatencyWithoutDBConns(t *testing.T) {
	c, _, stderr := testCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	code := c.run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-cpu-work", "1ms", "-db-latency", "50ms"})
	if msg := stderr.String(); code != exitUsage || !strings.Contains(msg, "-db-latency") {
		t.Errorf("serve -db-latency 50ms (no -db-conns): exit %d, stderr %q; want 2 and an error naming -db-latency", code, msg)
	}
}

// TestServeGoAwayTimingWithoutGoAway: -goaway-after and -goaway-every
// without -goaway (which would be ignored: no GOAWAY is sent) are a usage
// error naming -goaway.
func TestServeGoAwayTimingWithoutGoAway(t *testing.T) {
	for _, flag := range []string{"-goaway-after", "-goaway-every"} {
		c, _, stderr := testCLI(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		code := c.run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-cpu-work", "1ms", flag, "1s"})
		cancel()
		if msg := stderr.String(); code != exitUsage || !strings.Contains(msg, flag) || !strings.Contains(msg, "need -goaway") {
			t.Errorf("serve %s 1s (no -goaway): exit %d, stderr %q; want 2 and an error naming %s and -goaway", flag, code, msg, flag)
		}
	}
}

// TestStatusUnprotectedNamesCause: levee status against the -metrics-addr
// of levee serve -unprotected, which has no debug page, fails with a
// message that says why (the server is unprotected), not a bare "404 page
// not found".
func TestStatusUnprotectedNamesCause(t *testing.T) {
	_, httpAddr, _ := startServe(t, "-unprotected")
	c, _, stderr := testCLI(t)
	code := c.run(context.Background(), []string{"status", httpAddr})
	http.DefaultClient.CloseIdleConnections()
	if msg := stderr.String(); code != exitFail || !strings.Contains(msg, "-unprotected") {
		t.Errorf("levee status %s (levee serve -unprotected): exit %d, stderr %q; want 1 and a message naming -unprotected", httpAddr, code, msg)
	}
}
