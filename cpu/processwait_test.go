package cpu

import (
	"testing"
	"time"
)

// TestProcessWaitNotDoubleCounted: a sample of the process source that
// fails part-way through /proc/self/task leaves the cumulative Wait as
// it was, so that the next sample does not add the run delay of the
// threads read before the failure a second time. Before, Wait read 200
// or 250 ms where 150 ms accrued (readdir's order decides which).
func TestProcessWaitNotDoubleCounted(t *testing.T) {
	root := fixture(t, "host-only") // threads 100 (1ms wait) and 101 (2ms wait)
	f := newFakeSys()
	src, err := newProcess(root, f.env(), "")
	if err != nil {
		t.Fatal(err)
	}
	// Sample 2: 100 unreadable, 101 +100ms. Whichever order readdir
	// gives, one of samples 2 and 3 reads the good thread first.
	write(t, root, procTasks+"/100/schedstat", "x y z\n")
	write(t, root, procTasks+"/101/schedstat", "7000000 102000000 12\n")
	if _, err := src.Sample(); err == nil {
		t.Fatal("sample 2 succeeded with a garbage schedstat")
	}
	// Sample 3: 100 +50ms, 101 unreadable.
	write(t, root, procTasks+"/100/schedstat", "5000000 51000000 10\n")
	write(t, root, procTasks+"/101/schedstat", "x y z\n")
	if _, err := src.Sample(); err == nil {
		t.Fatal("sample 3 succeeded with a garbage schedstat")
	}
	// Sample 4: both readable: 100 +50ms, 101 +100ms since sample 1.
	write(t, root, procTasks+"/101/schedstat", "7000000 102000000 12\n")
	s, err := src.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if want := 150 * time.Millisecond; s.Wait != want {
		t.Errorf("Wait after two partly failed samples = %v, want %v (run delay counted twice)", s.Wait, want)
	}
}
