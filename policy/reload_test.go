package policy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/cpu"
)

const emptyCall = "/grpc.testing.TestService/EmptyCall"

// newTestReloader writes content to a fresh file and loads it, with the
// log captured.
func newTestReloader(t *testing.T, content string, opts ...Option) (*Reloader, string, *logLines) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &logLines{}
	r, err := NewReloader(path, append([]Option{WithLogf(logs.printf)}, opts...)...)
	if err != nil {
		t.Fatalf("NewReloader: %v", err)
	}
	t.Cleanup(r.Close)
	return r, path, logs
}

type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// instances returns the guard instances of the policy in force, by rule
// and guard name.
func instances(r *Reloader) map[string]admission.Guard {
	out := map[string]admission.Guard{}
	for _, rule := range r.cur.Load().rules {
		for _, g := range rule.Guards {
			out[rule.Name+"/"+g.Name()] = g
		}
	}
	return out
}

const twoGuards = `
rules:
  - name: r
    methods: [/grpc.testing.TestService/*]
    guards:
      - {type: ratelimit, name: a, rate: 1/h, burst: 2}
      - {type: bulkhead, name: b, limit: 10}
`

// TestReloadKeepsUnchangedGuards: after a reload, a guard whose name and
// parameters did not change is the same instance, with its state (here:
// the tokens it gave out); a changed one is new, and a removed one leaves
// Stats.
func TestReloadKeepsUnchangedGuards(t *testing.T) {
	r, path, logs := newTestReloader(t, twoGuards)
	before := instances(r)
	call := func() error {
		_, err := r.Server().UnaryServerInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: emptyCall},
			func(context.Context, any) (any, error) { return nil, nil })
		return err
	}
	// The bucket of a holds 2 tokens and refills once an hour.
	for i := range 2 {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	write(t, path, strings.Replace(twoGuards, "limit: 10", "limit: 11", 1)+`
  - name: other
    methods: [/grpc.testing.TestService/UnaryCall]
    guards: [{type: deadline}]
`)
	if err := r.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	after := instances(r)
	if after["r/a"] != before["r/a"] {
		t.Error("guard a (unchanged) is a new instance after the reload, want the same")
	}
	if after["r/b"] == before["r/b"] {
		t.Error("guard b (limit 10 → 11) is the same instance after the reload, want a new one")
	}
	if err := call(); err == nil {
		t.Error("third call admitted: the reused bucket of a lost its state (2 tokens taken)")
	}
	if !strings.Contains(logs.String(), "loaded: policy "+HashString(r.Hash())) {
		t.Errorf("log lacks the load of policy %s:\n%s", HashString(r.Hash()), logs)
	}
	// Remove rule r: its guards leave Stats.
	write(t, path, "rules:\n  - name: other\n    methods: [/grpc.testing.TestService/UnaryCall]\n    guards: [{type: deadline}]\n")
	if err := r.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	for _, st := range r.Stats() {
		if st.Rule == "r" {
			t.Errorf("Stats() after removing rule r still has %+v", st)
		}
	}
	if ok, failed := r.Reloads(); ok != 2 || failed != 0 {
		t.Errorf("Reloads() = %d, %d; want 2, 0", ok, failed)
	}
}

// TestReloadBadFileKeepsPolicy: a file that does not decode or build
// leaves the policy in force, counts a failure and says so.
func TestReloadBadFileKeepsPolicy(t *testing.T) {
	r, path, logs := newTestReloader(t, twoGuards, WithoutCPU())
	hash := r.Hash()
	for i, bad := range []string{
		"rules: [", // syntax
		"rules: [{guards: [{type: ratelimit}]}]\n", // invalid
		"rules: [{guards: [{type: loadshed}]}]\n",  // valid, but no CPU signal to build it (WithoutCPU)
	} {
		write(t, path, bad)
		err := r.Reload()
		if err == nil {
			t.Fatalf("Reload of bad file %d: nil error", i)
		}
		if r.Hash() != hash {
			t.Fatalf("bad file %d changed the policy in force", i)
		}
		if _, failed := r.Reloads(); failed != uint64(i+1) {
			t.Errorf("failed reloads = %d after bad file %d, want %d", failed, i, i+1)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil || r.Hash() != hash {
		t.Errorf("Reload of a removed file: err = %v, hash changed %v; want an error and the policy kept", err, r.Hash() != hash)
	}
	if got := logs.String(); !strings.Contains(got, "rejected, keeping policy "+HashString(hash)) || !strings.Contains(got, "policy.yaml:1:1: rules[0].guards[0].rate") && !strings.Contains(got, "rules[0].guards[0].rate") {
		t.Errorf("log does not say the file was rejected and why:\n%s", got)
	}
}

// TestShadowGuard: a guard in shadow mode alone counts its refusals as
// shadow refusals and refuses nothing, while the rule's other guards
// enforce.
func TestShadowGuard(t *testing.T) {
	r, _, _ := newTestReloader(t, `
rules:
  - name: r
    guards:
      - {type: ratelimit, name: shadowed, rate: 1/h, burst: 1, shadow: true}
      - {type: deadline, name: dl, shadow: true}
      - {type: ratelimit, name: enforced, rate: 1/h, burst: 3}
`)
	var refused int
	for range 5 {
		_, err := r.Server().UnaryServerInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: emptyCall},
			func(context.Context, any) (any, error) { return nil, nil })
		if err != nil {
			refused++
		}
	}
	if refused != 2 {
		t.Errorf("%d of 5 calls refused, want 2 (the enforced bucket holds 3)", refused)
	}
	got := map[string]admission.GuardStats{}
	for _, st := range r.Stats() {
		got[st.Guard] = st
	}
	// shadowed: 1 token; calls 2..5 reach it and are shadow-refused.
	if s := got["shadowed"]; s.ShadowRefused != 4 || s.Refused != 0 || s.Admitted != 1 {
		t.Errorf("shadowed guard stats = %+v, want Admitted 1, ShadowRefused 4", s)
	}
	if s := got["enforced"]; s.Refused != 2 || s.Admitted != 3 {
		t.Errorf("enforced guard stats = %+v, want Admitted 3, Refused 2", s)
	}
}

// TestShadowCountsRestartWithTheirRule: a reload that changes a rule
// (here, adds a guard) gives it a new chain, whose decision counts start
// at zero, and its shadow guard's refusal count starts with them. Before,
// the shadow guard kept its count across the reload and Stats took it off
// the new chain's admissions: a call admitted after the reload read as
// Admitted 0, ShadowRefused 1. A reload that leaves the rule as it was
// keeps both counts.
func TestShadowCountsRestartWithTheirRule(t *testing.T) {
	const before = `
rules:
  - name: r
    methods: [/grpc.testing.TestService/*]
    guards:
      - {type: bulkhead, name: b, limit: 1, shadow: true}
`
	r, path, _ := newTestReloader(t, before, WithoutCPU(), WithoutMemory())
	call := func(hold, started chan struct{}) error {
		_, err := r.Server().UnaryServerInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: emptyCall},
			func(context.Context, any) (any, error) {
				if started != nil {
					close(started)
				}
				if hold != nil {
					<-hold
				}
				return nil, nil
			})
		return err
	}
	// twoAtOnce makes two calls at once: the bulkhead (limit 1) admits the
	// first, and shadow-refuses the second, which is let through.
	twoAtOnce := func() {
		t.Helper()
		hold, started, done := make(chan struct{}), make(chan struct{}), make(chan error)
		go func() { done <- call(hold, started) }()
		<-started
		if err := call(nil, nil); err != nil {
			t.Fatal(err)
		}
		close(hold)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	twoAtOnce()
	stats := func() admission.GuardStats {
		t.Helper()
		for _, st := range r.Stats() {
			if st.Rule == "r" && st.Guard == "b" {
				return st
			}
		}
		t.Fatal("no stats for r/b")
		return admission.GuardStats{}
	}
	if s := stats(); s.Admitted != 1 || s.ShadowRefused != 1 {
		t.Fatalf("before the reload: %+v, want Admitted 1, ShadowRefused 1", s)
	}
	write(t, path, before+"      - {type: ratelimit, name: rl, rate: 1000/s, burst: 100}\n")
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := call(nil, nil); err != nil { // admitted by the bulkhead
		t.Fatal(err)
	}
	if s := stats(); s.Admitted != 1 || s.ShadowRefused != 0 {
		t.Errorf("after a reload that changed the rule and one admitted call: Admitted %d, ShadowRefused %d; want 1, 0 (the rule's counts restarted)", s.Admitted, s.ShadowRefused)
	}
	// A reload that adds a rule and leaves this one as it was: its counts
	// go on.
	write(t, path, before+"      - {type: ratelimit, name: rl, rate: 1000/s, burst: 100}\n"+
		"  - {name: other, methods: [/a.B/*], guards: [{type: deadline}]}\n")
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	twoAtOnce()
	if s := stats(); s.Admitted != 2 || s.ShadowRefused != 1 {
		t.Errorf("after a reload that kept the rule and two more calls: Admitted %d, ShadowRefused %d; want 2, 1 (the counts went on)", s.Admitted, s.ShadowRefused)
	}
}

// TestWatchKubernetesSymlinkSwap: the watch follows a ConfigMap's update,
// where the file is a symlink through ..data, a symlink to a directory
// that is replaced whole.
func TestWatchKubernetesSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	mk := func(version, content string) {
		d := filepath.Join(dir, version)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(d, "policy.yaml"), content)
	}
	mk("..2026_11_30_1", twoGuards)
	if err := os.Symlink("..2026_11_30_1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "policy.yaml")
	if err := os.Symlink("..data/policy.yaml", path); err != nil {
		t.Fatal(err)
	}
	r, err := NewReloader(path, WithLogf(func(string, ...any) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	reports := reportTo(r)
	if err := r.Watch(); err != nil {
		t.Fatal(err)
	}
	if err := r.Watch(); err == nil {
		t.Error("second Watch: nil error, want one")
	}
	swap := func(version, content string) {
		mk(version, content)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(version, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for !ok() {
			select {
			case <-reports:
			case <-timeout:
				t.Fatalf("no reload after %s within 5s", what)
			}
		}
	}
	second := strings.Replace(twoGuards, "limit: 10", "limit: 12", 1)
	swap("..2026_11_30_2", second)
	want := mustDecode(t, second).Hash()
	waitFor("the first swap", func() bool { return r.Hash() == want })
	if err := os.RemoveAll(filepath.Join(dir, "..2026_11_30_1")); err != nil {
		t.Fatal(err)
	}
	// A bad version keeps the second; a good one after it is loaded.
	swap("..2026_11_30_3", "rules: nope\n")
	waitFor("the bad swap", func() bool { _, failed := r.Reloads(); return failed > 0 })
	if r.Hash() != want {
		t.Fatal("a bad ConfigMap version replaced the policy in force")
	}
	third := strings.Replace(twoGuards, "limit: 10", "limit: 13", 1)
	swap("..2026_11_30_4", third)
	want = mustDecode(t, third).Hash()
	waitFor("the third swap", func() bool { return r.Hash() == want })
}

// testService answers EmptyCall after a little work, so that calls are
// in flight while the policy changes.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (testService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	var x uint64
	for i := range 2000 {
		x += uint64(i) * x
	}
	_ = x
	return &testgrpc.Empty{}, nil
}

// TestReloadUnderLoad rewrites the policy file 100 times, one version in
// three invalid, while clients call a real gRPC server on loopback and the
// file is also watched: no call fails, the policy in force is always one
// of the valid versions, the last valid one after each reload, and no
// goroutine is left behind (TestMain's goleak). The bulkhead holds as many
// slots as there can be calls in flight, with some slack, so a permit
// given back to the wrong guard, or not at all, would show as refusals.
func TestReloadUnderLoad(t *testing.T) {
	const (
		versions = 100
		workers  = 4
	)
	version := func(i int) (string, bool) {
		switch i % 3 {
		case 1:
			return fmt.Sprintf("rules:\n  - name: r\n    guards: [{type: ratelimit, rate: %d}]\n", i), false // no unit
		case 2:
			if i%2 == 0 {
				return "rules: [\n", false
			}
		}
		shadow := i%4 == 0
		name := []string{"a", "b"}[i/6%2]
		return fmt.Sprintf(`
exempt: []
rules:
  - name: r
    shadow: %t
    methods: [/grpc.testing.TestService/*]
    key: peer
    guards:
      - {type: deadline, margin: 0.01}
      - {type: queuedelay, target: 1h, interval: 1h}
      - {type: ratelimit, name: %s, rate: 1e8/s, burst: 1000000}
      - {type: keyed_ratelimit, name: client, rate: %d/ms, burst: 1000000}
      - {type: bulkhead, name: slots, limit: %d}
      - {type: adaptive_bulkhead, name: adaptive, min_limit: 100, max_limit: 1000, shadow: true}
`, shadow, name, 1000+i%5, 2*workers+2), true
	}
	valid := map[uint64]bool{}
	hashes := make([]uint64, versions)
	for i := range versions {
		if s, ok := version(i); ok {
			hashes[i] = mustDecode(t, s).Hash()
			valid[hashes[i]] = true
		}
	}
	first, _ := version(0)
	r, path, _ := newTestReloader(t, first)
	if err := r.Watch(); err != nil {
		t.Fatal(err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(r.ServerOptions()...)
	testgrpc.RegisterTestServiceServer(srv, testService{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	var (
		stop     atomic.Bool
		calls    atomic.Int64
		failures atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
				cancel()
				calls.Add(1)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	// Someone watches the policy in force all along.
	var invalidSeen atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if !valid[r.Hash()] {
				invalidSeen.Add(1)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()

	want := r.Hash()
	base, peak := runtime.NumGoroutine(), 0
	for i := 1; i < versions; i++ {
		s, ok := version(i)
		write(t, path, s)
		// Let some calls run under this version before reloading it.
		for n := calls.Load(); calls.Load() < n+2; {
			time.Sleep(50 * time.Microsecond)
		}
		err := r.Reload()
		if ok {
			if err != nil {
				t.Fatalf("version %d: Reload: %v", i, err)
			}
			want = hashes[i]
		} else if err == nil {
			t.Fatalf("version %d (invalid): Reload succeeded", i)
		}
		peak = max(peak, runtime.NumGoroutine())
		if got := r.Hash(); got != want {
			t.Fatalf("after version %d the policy in force is %s, want %s", i, HashString(got), HashString(want))
		}
	}
	// The last calls run under the last policy, then everyone stops.
	for n := calls.Load(); calls.Load() < n+20; {
		time.Sleep(50 * time.Microsecond)
	}
	stop.Store(true)
	wg.Wait()
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}

	if n := failures.Load(); n > 0 {
		t.Errorf("%d of %d calls failed during the reloads; first: %v", n, calls.Load(), firstErr.Load())
	}
	if n := invalidSeen.Load(); n > 0 {
		t.Errorf("a policy that is not one of the valid versions was in force %d times", n)
	}
	// Most valid versions build new per-client buckets, whose sweeper is
	// a goroutine: about 60 would pile up if the old ones did not stop.
	// The slack is for the calls' own goroutines.
	if peak > base+20 {
		t.Errorf("goroutines grew from %d to %d during the reloads", base, peak)
	}
	ok, failed := r.Reloads()
	if ok < 66 || failed < 33 {
		t.Errorf("Reloads() = %d ok, %d failed; want at least 66 and 33", ok, failed)
	}
	t.Logf("%d calls, %d reloads ok, %d failed; goroutines %d at the start, at most %d", calls.Load(), ok, failed, base, peak)
	if calls.Load() < 100*2 {
		t.Errorf("only %d calls ran during 100 versions, want at least 200", calls.Load())
	}
}

// TestCPUSignal: guards that follow the CPU get the Reloader's signal, and
// a loadshed guard builds with it.
func TestCPUSignal(t *testing.T) {
	mon, err := cpu.NewManual()
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	r, _, _ := newTestReloader(t, "preset: {}\nrules:\n  - {methods: [/a.B/C], guards: [{type: loadshed, policy: step}, {type: runlimit}]}\n", WithCPU(mon))
	if g := instances(r)["/a.B/C/loadshed"]; g == nil {
		t.Fatalf("no loadshed guard in %v", instances(r))
	}
}

func TestNewReloaderErrors(t *testing.T) {
	if _, err := NewReloader(filepath.Join(t.TempDir(), "none.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("NewReloader(missing file): err = %v, want ErrNotExist", err)
	}
	path := filepath.Join(t.TempDir(), "bad.yaml")
	write(t, path, "preset: {max_rate: 1}\n")
	_, err := NewReloader(path)
	var es Errors
	if !errors.As(err, &es) || !strings.Contains(err.Error(), "bad.yaml:1:20: preset.max_rate") {
		t.Errorf("NewReloader(bad file): err = %v, want Errors naming bad.yaml:1:20: preset.max_rate", err)
	}
}
