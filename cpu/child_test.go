//go:build linux

package cpu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The pinned-process test re-executes this test binary as a child; the
// environment variable says which role the child plays.
const childEnv = "LEVEE_CPU_TEST_CHILD"

// childResult is what the measuring child prints.
type childResult struct {
	Source       string // the detected source
	Measured     string // the source the numbers below come from
	CPUs         int    // CPUs in the child's affinity mask
	GOMAXPROCS   int
	Allowance    float64
	Idle         float64 // utilisation while idle (the neighbour is busy)
	Burn         float64 // utilisation while burning its CPU
	BurnWait     float64 // the part of Burn that was run-queue wait
	HostWideIdle float64 // all CPUs of the host during the idle phase (what the peers read)
}

// runChild runs the child role named by childEnv, if any, and reports
// whether it did.
func runChild() bool {
	switch os.Getenv(childEnv) {
	case "burn":
		burnUntilStdinCloses()
	case "measure":
		if err := measureChild(); err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
	default:
		return false
	}
	os.Exit(0)
	return true
}

// burnUntilStdinCloses burns one CPU until the parent closes stdin (or
// 10 s pass, so no orphan outlives a crashed parent), then prints the CPU
// time it used and the wall time.
func burnUntilStdinCloses() {
	start := time.Now()
	var stop atomic.Bool
	go func() {
		buf := make([]byte, 1)
		os.Stdin.Read(buf)
		stop.Store(true)
	}()
	deadline := start.Add(10 * time.Second)
	x := 0
	for !stop.Load() && time.Now().Before(deadline) {
		for i := 0; i < 100000; i++ {
			x += i
		}
	}
	used, _ := processCPUTime()
	fmt.Printf("BURNED %d %d %d\n", used, time.Since(start), x&1)
}

func measureChild() error {
	det, err := Detect()
	if err != nil {
		return err
	}
	src := det
	if _, ok := det.(*process); !ok {
		// A host where the process has a cgroup of its own: the neighbour
		// shares it, so measure the process itself for this check.
		if src, err = NewProcess("/"); err != nil {
			return err
		}
	}
	all := make([]int, 0, 64)
	for i := 0; i < 1024; i++ {
		all = append(all, i)
	}
	hostEnv := defaultEnv()
	hostEnv.cpus = func() ([]int, error) { return all, nil }
	hostWide, err := newHost("/", hostEnv)
	if err != nil {
		return err
	}
	cpus, _ := affinityCPUs()
	res := childResult{Source: det.String(), Measured: src.String(), CPUs: len(cpus), GOMAXPROCS: runtime.GOMAXPROCS(0)}

	// Idle phase: only the neighbour on the other CPU is busy.
	a0, _ := src.Sample()
	h0, _ := hostWide.Sample()
	time.Sleep(300 * time.Millisecond)
	a1, _ := src.Sample()
	h1, _ := hostWide.Sample()
	res.Idle, res.HostWideIdle = Utilization(a0, a1), Utilization(h0, h1)

	// Burn phase: one goroutine burns this process's only CPU.
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		x := 0
		for !stop.Load() {
			for i := 0; i < 10000; i++ {
				x += i
			}
		}
		_ = x
	}()
	time.Sleep(50 * time.Millisecond) // let it start
	b0, err := src.Sample()
	if err != nil {
		return err
	}
	time.Sleep(800 * time.Millisecond)
	b1, err := src.Sample()
	if err != nil {
		return err
	}
	stop.Store(true)
	<-done
	res.Burn, res.Allowance = Utilization(b0, b1), b1.Allowance
	res.BurnWait = float64(b1.Wait-b0.Wait) / float64(b1.Time.Sub(b0.Time))
	out, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", out)
	return nil
}

// startPinned starts cmd with its affinity limited to cpu: the fork
// happens on an OS thread whose mask is set to that CPU, and the child
// inherits it (what taskset does). The thread's mask is restored after.
func startPinned(cmd *exec.Cmd, cpu int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return fmt.Errorf("sched_getaffinity: %w", err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("sched_setaffinity(cpu %d): %w", cpu, err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil && err == nil {
		err = fmt.Errorf("restoring the affinity mask: %w", rerr)
	}
	return err
}

// TestPinnedProcess: a process limited to one CPU (GOMAXPROCS=1 and its
// affinity) that burns that CPU reads >= 0.9 with the detected source,
// while a busy neighbour process on the other CPU does not raise its
// reading (it stays near 0 while the process is idle).
func TestPinnedProcess(t *testing.T) {
	cpus, err := affinityCPUs()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if after, _ := affinityCPUs(); len(after) != len(cpus) {
			t.Errorf("the test changed its own affinity mask: %v, was %v", after, cpus)
		}
	}()
	if len(cpus) < 2 {
		t.Skipf("needs 2 CPUs in the affinity mask, have %v", cpus)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	mine, other := cpus[0], cpus[1]

	neighbour := exec.Command(exe, "-test.run=^$")
	neighbour.Env = append(os.Environ(), childEnv+"=burn", "GOMAXPROCS=1")
	stdin, err := neighbour.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var nout strings.Builder
	neighbour.Stdout = &nout
	if err := startPinned(neighbour, other); err != nil {
		t.Fatal(err)
	}
	defer neighbour.Wait()
	defer stdin.Close()

	child := exec.Command(exe, "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=measure", "GOMAXPROCS=1")
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := startPinned(child, mine); err != nil {
		t.Fatal(err)
	}
	var res childResult
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if js, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
			if err := json.Unmarshal([]byte(js), &res); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := child.Wait(); err != nil {
		t.Fatalf("measuring child: %v; output %q", err, lines)
	}
	stdin.Close()
	if err := neighbour.Wait(); err != nil {
		t.Fatalf("neighbour: %v", err)
	}
	var nUsed, nWall, x int64
	if _, err := fmt.Sscanf(nout.String(), "BURNED %d %d %d", &nUsed, &nWall, &x); err != nil {
		t.Fatalf("neighbour output %q: %v", nout.String(), err)
	}
	t.Logf("child (CPU %d): %+v", mine, res)
	t.Logf("neighbour (CPU %d): %.2f CPU over %v", other, float64(nUsed)/float64(nWall), time.Duration(nWall))

	if res.CPUs != 1 || res.GOMAXPROCS != 1 || res.Allowance != 1 {
		t.Fatalf("child: CPUs %d, GOMAXPROCS %d, Allowance %v; want 1, 1, 1", res.CPUs, res.GOMAXPROCS, res.Allowance)
	}
	// The neighbour wants all of its CPU; other processes on this shared
	// machine may take part of it, but it must have burned a good share
	// for the check to mean anything.
	if float64(nUsed) < 0.2*float64(nWall) {
		t.Fatalf("neighbour used %.2f CPU, want >= 0.2 (it must really be busy for this test to mean anything)", float64(nUsed)/float64(nWall))
	}
	if res.Burn < 0.9 {
		t.Errorf("pinned burning process: utilisation %.3f with %s, want >= 0.9", res.Burn, res.Measured)
	}
	if res.Idle > 0.1 {
		t.Errorf("idle pinned process next to a busy neighbour: utilisation %.3f with %s, want <= 0.1", res.Idle, res.Measured)
	}
}
