package runlimit

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/runlimit/internal/fair"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mustNew(t testing.TB, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestNilPointerCPUIsNone: a nil pointer given as the CPU signal, such
// as a (*cpu.Monitor)(nil) from a monitor that could not start, is no
// signal, as nil is: the Limiter used to call its methods at its first
// decision and panic there, on a request path.
func TestNilPointerCPUIsNone(t *testing.T) {
	l, err := New(WithCPU((*cpu.Monitor)(nil)))
	if err != nil {
		t.Fatal(err)
	}
	if l.CPU() != nil {
		t.Errorf("CPU() = %#v, want nil", l.CPU())
	}
	if l.Overloaded(time.Now()) {
		t.Error("Overloaded() = true on an idle Limiter")
	}
	f := l.Flow("/svc/M")
	tk, err := f.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tk.Done(time.Now(), false)
}

func TestNewRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		give []Option
		want []string
	}{
		{"zero floor", []Option{WithBounds(0, 10)}, []string{"runlimit: WithBounds: want 1 <= floor <= ceiling <= 1073741824, got floor 0, ceiling 10"}},
		{"ceiling below floor", []Option{WithBounds(5, 4)}, []string{"got floor 5, ceiling 4"}},
		{"interval", []Option{WithInterval(0)}, []string{"runlimit: WithInterval: interval must be > 0 and <= 1h0m0s, got 0s"}},
		{"huge interval", []Option{WithInterval(math.MaxInt64)}, []string{"runlimit: WithInterval: interval must be > 0 and <= 1h0m0s, got 2562047h47m16.854775807s"}},
		{"target", []Option{WithQueueTarget(-time.Millisecond)}, []string{"runlimit: WithQueueTarget: target must be >= 0 and <= 1h0m0s, got -1ms"}},
		{"huge target", []Option{WithQueueTarget(MaxDuration + 1)}, []string{"runlimit: WithQueueTarget: target must be >= 0 and <= 1h0m0s, got 1h0m0.000000001s"}},
		{"flows", []Option{WithMaxFlows(0)}, []string{"runlimit: WithMaxFlows: n must be >= 1, got 0"}},
		{"all at once", []Option{WithBounds(0, 0), WithInterval(-1), WithMaxFlows(-1)}, []string{"WithBounds", "WithInterval", "WithMaxFlows"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := New(tt.give...)
			if l != nil || err == nil {
				t.Fatalf("New() = %v, %v; want nil and an error", l, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New() error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestLongestQueueTargetWaits: at the longest queue target New accepts,
// the waits and holds made of it are still long, not wrapped around to
// the negative (which ran every queued call beyond the limit at once).
func TestLongestQueueTargetWaits(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(MaxDuration), WithInterval(MaxDuration))
	f := l.Flow("m")
	ln := f.Lane("", admission.Critical)
	for _, roomy := range []bool{false, true} {
		l.sh.SetRoomy(ln.class.Index(), roomy)
		l.sh.SetSlack(int64(MaxDuration))
		if p, w := ln.patience(), ln.waitLimit(l.nanos(l.o.now())); p < 2*MaxDuration || w < p {
			t.Errorf("roomy %v: patience %v, wait limit %v; want at least twice %v", roomy, p, w, MaxDuration)
		}
	}
	if h := f.streamHold(); h < MaxDuration {
		t.Errorf("streamHold() = %v, want at least %v", h, MaxDuration)
	}
}

func TestInitialLimitClampedIntoBounds(t *testing.T) {
	if got := mustNew(t, WithBounds(3, 5), WithInitialLimit(100)).Limit(); got != 5 {
		t.Errorf("Limit() = %d, want 5 (the ceiling)", got)
	}
	if got := mustNew(t, WithBounds(3, 5), WithInitialLimit(1)).Limit(); got != 3 {
		t.Errorf("Limit() = %d, want 3 (the floor)", got)
	}
}

// TestCheapFlowServedFirst: with one turn, a flood of one flow waiting and
// then one call of a cheap flow, the cheap call gets one of the first two
// turns (start-time fair queueing), not the sixth (FIFO).
func TestCheapFlowServedFirst(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Minute))
	flood, cheap := l.Flow("flood"), l.Flow("cheap")
	flood.svc.Store(int64(5 * time.Millisecond))
	cheap.svc.Store(int64(100 * time.Microsecond))
	hold, ok := flood.TryAcquire(time.Now())
	if !ok {
		t.Fatal("TryAcquire on an idle limiter failed")
	}
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	enqueue := func(f *Flow, want int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, err := f.Acquire(context.Background())
			if err != nil {
				t.Errorf("Acquire(%s) = %v", f.Name(), err)
				return
			}
			mu.Lock()
			order = append(order, f.Name())
			mu.Unlock()
			tk.Release()
		}()
		for l.Waiting() < want {
			time.Sleep(100 * time.Microsecond)
		}
	}
	for i := range 5 {
		enqueue(flood, i+1)
	}
	enqueue(cheap, 6)
	hold.Release()
	wg.Wait()
	if len(order) != 6 {
		t.Fatalf("served %v, want 6 calls", order)
	}
	if order[0] != "cheap" && order[1] != "cheap" {
		t.Errorf("served in order %v; want the cheap call among the first two", order)
	}
	if l.Running() != 0 || l.Waiting() != 0 {
		t.Errorf("after all calls: running %d, waiting %d; want 0, 0", l.Running(), l.Waiting())
	}
}

func TestAcquireTimesOutAndRespectsContext(t *testing.T) {
	cpu := &fakeCPU{saturated: true} // evidence of overload
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(2*time.Millisecond), WithCPU(cpu))
	f := l.Flow("m")
	hold, _ := f.TryAcquire(time.Now())
	if _, err := f.Acquire(context.Background()); !errors.Is(err, ErrTimeout) {
		t.Errorf("Acquire with the only turn held and the CPU saturated = %v, want ErrTimeout", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire with a canceled context = %v, want context.Canceled", err)
	}
	if l.Waiting() != 0 {
		t.Errorf("Waiting() = %d after the waiters gave up, want 0", l.Waiting())
	}
	hold.Release()
	if l.Running() != 0 {
		t.Errorf("Running() = %d after release, want 0", l.Running())
	}
}

func TestAdmissibleBoundsTheQueue(t *testing.T) {
	l := mustNew(t, WithBounds(2, 2), WithQueueTarget(10*time.Millisecond))
	f := l.Flow("m")
	f.svc.Store(int64(5 * time.Millisecond))
	ci := admission.Critical.Index()
	for _, tt := range []struct {
		roomy bool
		cases []struct {
			queued, pending int64
			want            bool
		}
	}{
		// The server full: 2 turns x 10ms/2 / 5ms, plus 2: 4 may wait.
		{false, []struct {
			queued, pending int64
			want            bool
		}{{0, 0, true}, {3, 0, true}, {4, 0, false}, {1, 2, true}, {1, 3, false}, {9, 0, false}}},
		// Room left: a whole target, 2 turns x 10ms / 5ms, plus 2: 6.
		{true, []struct {
			queued, pending int64
			want            bool
		}{{0, 0, true}, {5, 0, true}, {6, 0, false}, {3, 2, true}, {3, 3, false}, {9, 0, false}}},
	} {
		l.sh.SetRoomy(ci, tt.roomy)
		for _, q := range tt.cases {
			crit(f).count.Store(q.queued + q.pending)
			if got := f.Admissible(); got != q.want {
				t.Errorf("roomy %v, with %d waiting and %d reserved: Admissible() = %v, want %v", tt.roomy, q.queued, q.pending, got, q.want)
			}
		}
	}
	crit(f).count.Store(0)
}

// TestNoteRoom: a class leaves room while the classes below it get a
// twentieth of the turns; the server is full while its turns are busy
// nine tenths of the time.
func TestNoteRoom(t *testing.T) {
	shed, crit := admission.Sheddable.Index(), admission.Critical.Index()
	for _, tt := range []struct {
		name              string
		busy              float64 // of the interval's turn time
		servedShed, other int64
		wantShed, wantCr  bool
		wantFull          bool
	}{
		{"half busy", 0.5, 0, 100, false, false, false},
		{"half busy, sheddable gets 40%", 0.5, 40, 60, false, true, false},
		{"full, critical only", 0.95, 0, 100, false, false, true},
		{"full, sheddable gets 40%", 0.95, 40, 60, false, true, true},
		{"full, sheddable gets 2%", 0.95, 2, 98, false, false, true},
		{"idle", 0, 0, 0, false, false, false},
	} {
		l := mustNew(t, WithBounds(2, 2))
		for range 30 { // the smoothed counts settle
			l.sh.SetServed(shed, tt.servedShed)
			l.sh.SetServed(crit, tt.other)
			l.shareClasses()
		}
		span := int64(time.Second)
		l.opened = 0
		l.noteRoom(tt.busy*float64(span)*float64(l.limit.Load()), span)
		if got := l.sh.Roomy(shed); got != tt.wantShed {
			t.Errorf("%s: sheddable roomy = %v, want %v", tt.name, got, tt.wantShed)
		}
		if got := l.sh.Roomy(crit); got != tt.wantCr {
			t.Errorf("%s: critical roomy = %v, want %v", tt.name, got, tt.wantCr)
		}
		if got := l.sh.Full(); got != tt.wantFull {
			t.Errorf("%s: full = %v, want %v", tt.name, got, tt.wantFull)
		}
	}
}

// TestNoteRoomFullAtAFractionalLimit: the server is full when the turns
// handed out are busy, whatever the fraction of the estimate above them
// or a probe below it.
func TestNoteRoomFullAtAFractionalLimit(t *testing.T) {
	l := mustNew(t, WithBounds(1, 20))
	span := int64(time.Second)
	for _, tt := range []struct {
		est   float64
		limit int64
	}{{3.5, 3}, {10, 5}} {
		l.lr.Est = tt.est
		l.limit.Store(tt.limit)
		l.opened = 0
		l.noteRoom(float64(span)*float64(tt.limit), span) // every turn busy
		if !l.sh.Full() {
			t.Errorf("est %v, limit %d, every turn busy: not full, want full", tt.est, tt.limit)
		}
	}
}

// TestNoteRoomStarved: a lower class that had its share of the turns
// over the last few intervals but got none in the last fair.StarvedAfter ones
// while calls of it waited is starved: the class above leaves no room any
// more.
func TestNoteRoomStarved(t *testing.T) {
	l := mustNew(t, WithBounds(2, 2))
	shed, crit := admission.Sheddable.Index(), admission.Critical.Index()
	for range 30 {
		l.sh.SetServed(shed, 40)
		l.sh.SetServed(crit, 60)
		l.shareClasses()
	}
	l.sh.SetServed(crit, 100)
	l.shareClasses()
	l.opened = 0
	l.noteRoom(0.5*float64(time.Second), int64(time.Second))
	if !l.sh.Roomy(crit) {
		t.Fatalf("sheddable served in the smoothed counts, none waiting: critical not roomy, want roomy")
	}
	l.sh.AddWork(shed, int64(5*time.Millisecond)) // a sheddable call waits
	for i := 1; i <= fair.StarvedAfter; i++ {
		l.noteRoom(0.5*float64(time.Second), int64(time.Second))
		if got, want := l.sh.Roomy(crit), i < fair.StarvedAfter; got != want {
			t.Errorf("sheddable waiting and served nothing for %d intervals: critical roomy %v, want %v", i, got, want)
		}
	}
	l.sh.AddWork(shed, -int64(5*time.Millisecond))
}

// TestAdmissibleShareOnlyWhenFull: lanes of a class are held to their
// share of the queue only while the server is full and the class leaves
// no room.
func TestAdmissibleShareOnlyWhenFull(t *testing.T) {
	l := mustNew(t, WithBounds(2, 2), WithQueueTarget(40*time.Millisecond))
	f := l.Flow("m")
	f.svc.Store(int64(5 * time.Millisecond)) // 2 turns x 40ms/2 / 5ms, plus 2: 10 may wait
	ci := admission.Critical.Index()
	a, b := f.Lane("a", admission.Critical), f.Lane("b", admission.Critical)
	b.count.Store(5)
	l.sh.SetBacklogged(ci, 2*weightOne) // a and b both backlogged
	a.count.Store(6)
	l.sh.SetRoomy(ci, false)
	l.sh.SetFull(true)
	if a.Admissible() {
		t.Errorf("full server, two lanes backlogged, 6 waiting: Admissible, want held to half of 10")
	}
	l.sh.SetFull(false)
	if !a.Admissible() {
		t.Errorf("server not full, 6 waiting: not Admissible, want the whole 10")
	}
	a.count.Store(0)
	b.count.Store(0)
	l.sh.SetBacklogged(ci, 0)
}

// crit is the lane of f's calls of no tenant and class Critical.
func crit(f *Flow) *Lane { return &f.lanes[admission.Critical.Index()] }

func TestTurnsAllocateNothing(t *testing.T) {
	l := mustNew(t, WithBounds(4, 4))
	f := l.Flow("m")
	now := time.Now()
	n := testing.AllocsPerRun(1000, func() {
		tk, ok := f.TryAcquire(now)
		if !ok {
			t.Fatal("no turn")
		}
		tk.Done(now.Add(time.Millisecond), false)
	})
	if n != 0 {
		t.Errorf("TryAcquire+Done allocates %v times, want 0", n)
	}
}

func TestGuardThroughChain(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Millisecond), WithCPU(&fakeCPU{saturated: true}))
	ch, err := admission.NewChain("r", []admission.Guard{NewGuard("run", l)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	call := func() (admission.Call, *admission.Permits, int, admission.Decision) {
		c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: now}
		ps := new(admission.Permits)
		i, d := ch.Enter(&c, ps)
		return c, ps, i, d
	}
	c1, ps1, i, d := call()
	if i >= 0 {
		t.Fatalf("first call refused: %+v", d)
	}
	_, _, i, d = call()
	if i != 0 || d.Reason != ReasonTimeout {
		t.Fatalf("second call while the turn is held = %d %+v, want refused with %q", i, d, ReasonTimeout)
	}
	ch.Finish(&c1, ps1, admission.Outcome{Duration: 3 * time.Millisecond})
	if got := l.Flow("/s/M").ServiceTime(); got != 3*time.Millisecond {
		t.Errorf("ServiceTime() = %v after one 3ms call, want 3ms (the outcome's duration)", got)
	}
	if l.Running() != 0 {
		t.Errorf("Running() = %d after Finish, want 0", l.Running())
	}
	// Time queued in the transport is not held against a call: only its
	// deadline is.
	c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: now, Queued: time.Second}
	ps := new(admission.Permits)
	if i, d := ch.Enter(&c, ps); i >= 0 {
		t.Errorf("a call that queued 1s in the transport = %d %+v, want admitted", i, d)
	} else {
		ch.Finish(&c, ps, admission.Outcome{Duration: 3 * time.Millisecond})
	}
	now = time.Now()
	c = admission.Call{Ctx: context.Background(), Method: "/s/M", Now: now, Deadline: now.Add(time.Millisecond)}
	if i, d := ch.Enter(&c, new(admission.Permits)); i != 0 || !d.DeadlineTooShort {
		t.Errorf("a call with 1ms left for a 3ms method = %d %+v, want a DeadlineTooShort refusal", i, d)
	}
	if l.Running() != 0 {
		t.Errorf("Running() = %d after refusals, want 0", l.Running())
	}
}

// TestGuardReservationsBalance: every way through the guard — admitted and
// run, refused at start, admitted and abandoned — leaves no reservation
// behind.
func TestGuardReservationsBalance(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Millisecond), WithCPU(&fakeCPU{saturated: true}))
	ch, err := admission.NewChain("r", []admission.Guard{NewGuard("run", l)})
	if err != nil {
		t.Fatal(err)
	}
	f := l.Flow("/s/M")
	now := time.Now()
	c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: now}
	var held admission.Permits
	if i, d := ch.Admit(&c, &held); i >= 0 {
		t.Fatalf("Admit = %+v", d)
	}
	if crit(f).count.Load() != 1 {
		t.Fatalf("after Admit: %d reserved, want 1", crit(f).count.Load())
	}
	if i, d := ch.Start(&c, &held); i >= 0 {
		t.Fatalf("Start = %+v", d)
	}
	// The turn is held: a second call is admitted, waits 1ms, is refused.
	var refused admission.Permits
	c2 := c
	if i, _ := ch.Admit(&c2, &refused); i >= 0 {
		t.Fatal("second Admit refused")
	}
	if i, d := ch.Start(&c2, &refused); i != 0 || d.Reason != ReasonTimeout {
		t.Fatalf("second Start = %d %+v, want refused with %q", i, d, ReasonTimeout)
	}
	// A third is admitted and abandoned before its handler.
	var abandoned admission.Permits
	c3 := c
	if i, _ := ch.Admit(&c3, &abandoned); i >= 0 {
		t.Fatal("third Admit refused")
	}
	ch.Abandon(&c3, &abandoned)
	// A fourth whose deadline is too short once its turn comes.
	var late admission.Permits
	c4 := c
	c4.Deadline = time.Now().Add(-time.Millisecond)
	ch.Finish(&c, &held, admission.Outcome{Duration: time.Millisecond})
	held = admission.Permits{}
	if i, _ := ch.Admit(&c4, &late); i >= 0 {
		t.Fatal("fourth Admit refused")
	}
	c4.Now = time.Now() // its handler starts, as a transport sets it
	if i, d := ch.Start(&c4, &late); i != 0 || !d.DeadlineTooShort {
		t.Fatalf("fourth Start = %d %+v, want a DeadlineTooShort refusal", i, d)
	}
	if i, _ := ch.Admit(&c, &held); i >= 0 {
		t.Fatal("fifth Admit refused")
	}
	if i, d := ch.Start(&c, &held); i >= 0 {
		t.Fatalf("fifth Start = %+v", d)
	}
	ch.Finish(&c, &held, admission.Outcome{Duration: time.Millisecond})
	if got := crit(f).count.Load(); got != 0 {
		t.Errorf("after every call ended: %d reservations left, want 0", got)
	}
	if l.Running() != 0 || l.Waiting() != 0 {
		t.Errorf("running %d, waiting %d; want 0, 0", l.Running(), l.Waiting())
	}
}

// TestGuardLearnsOnlyFromSuccesses: a call canceled by its caller, or
// refused by the application, teaches the limiter nothing, nor does one
// that failed by overload.
func TestGuardLearnsOnlyFromSuccesses(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1))
	ch, err := admission.NewChain("r", []admission.Guard{NewGuard("run", l)})
	if err != nil {
		t.Fatal(err)
	}
	f := l.Flow("/s/M")
	run := func(o admission.Outcome) {
		t.Helper()
		c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: time.Now()}
		var ps admission.Permits
		if i, d := ch.Enter(&c, &ps); i >= 0 {
			t.Fatalf("Enter = %+v", d)
		}
		ch.Finish(&c, &ps, o)
	}
	run(admission.Outcome{Duration: 10 * time.Millisecond})
	run(admission.Outcome{Err: context.Canceled, Duration: time.Microsecond})
	run(admission.Outcome{Err: errors.New("not found"), Duration: time.Microsecond})
	if got := f.ServiceTime(); got != 10*time.Millisecond {
		t.Errorf("ServiceTime() = %v after one 10ms success and two fast failures, want 10ms", got)
	}
	run(admission.Outcome{Err: errors.New("deadline"), Overload: true, Duration: time.Second})
	if got := f.ServiceTime(); got != 10*time.Millisecond {
		t.Errorf("ServiceTime() = %v after an overload failure, want still 10ms", got)
	}
	if l.Running() != 0 {
		t.Errorf("Running() = %d, want 0", l.Running())
	}
}

// TestStressTurnsBalance: many callers of two flows take turns through the
// guard while the limit learns every millisecond, probes included; at the
// end no turn, wait or reservation is left, and every call was answered.
func TestStressTurnsBalance(t *testing.T) {
	l := mustNew(t, WithBounds(1, 8), WithInitialLimit(4), WithInterval(time.Millisecond))
	ch, err := admission.NewChain("r", []admission.Guard{NewGuard("run", l)})
	if err != nil {
		t.Fatal(err)
	}
	const callers, calls = 16, 200
	var wg sync.WaitGroup
	var answered, admitted atomic.Int64
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			method := "/s/A"
			if g%4 == 0 {
				method = "/s/B"
			}
			for i := range calls {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				c := admission.Call{Ctx: ctx, Method: method, Now: time.Now()}
				var ps admission.Permits
				i2, _ := ch.Admit(&c, &ps)
				if i2 < 0 {
					if i%7 == 0 {
						ch.Abandon(&c, &ps) // the stream ended before its handler
					} else if j, _ := ch.Start(&c, &ps); j < 0 {
						admitted.Add(1)
						time.Sleep(time.Duration(i%3) * 100 * time.Microsecond)
						c.Now = time.Now()
						var err error
						if i%11 == 0 {
							err = context.Canceled
						}
						ch.Finish(&c, &ps, admission.Outcome{Err: err, Duration: time.Duration(i%3) * 100 * time.Microsecond})
					}
				}
				answered.Add(1)
				cancel()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("callers stuck: %d of %d answered, running %d, waiting %d", answered.Load(), callers*calls, l.Running(), l.Waiting())
	}
	if admitted.Load() == 0 {
		t.Fatal("no call was admitted: the test exercised nothing")
	}
	if l.Running() != 0 || l.Waiting() != 0 {
		t.Errorf("after every call: running %d, waiting %d; want 0, 0", l.Running(), l.Waiting())
	}
	for _, f := range l.allFlows() {
		for i := range f.lanes {
			if n := f.lanes[i].count.Load(); n != 0 {
				t.Errorf("flow %s, class %v: %d reserved or queued after every call; want 0", f.Name(), f.lanes[i].class, n)
			}
		}
	}
	for i := range admission.Classes {
		if w, b := l.sh.Work(i), l.sh.Backlogged(i); w != 0 || b != 0 {
			t.Errorf("class %d: work %d, backlogged weight %d after every call; want 0, 0", i, w, b)
		}
	}
}

// A service time learned in a stall, longer than every caller's deadline,
// must not refuse every call at its start for good: once no call has
// finished for twice that time (at least a second), it is not held against
// deadlines until calls teach it again.
func TestStaleServiceTimeDoesNotLockOut(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := mustNew(t, withClock(func() time.Time { return now }), WithBounds(4, 4))
	f := l.Flow("/svc/Call")
	for range 30 {
		tk, ok := f.TryAcquire(now)
		if !ok {
			t.Fatal("no turn")
		}
		tk.Done(now.Add(1500*time.Millisecond), false)
	}
	end := now.Add(1500 * time.Millisecond)
	if st := f.ServiceTimeAt(end.Add(time.Second)); st < time.Second {
		t.Fatalf("1s after the last call: ServiceTimeAt = %v, want the learned ~1.5s", st)
	}
	if st := f.ServiceTimeAt(end.Add(3100 * time.Millisecond)); st != 0 {
		t.Errorf("3.1s after the last call of ~1.5s: ServiceTimeAt = %v, want 0 (stale)", st)
	}
	// Through the guard: a call with a 1s deadline starts once stale.
	g := NewGuard("run", l).(interface {
		admission.Guard
		admission.Starter
	})
	now = end.Add(3100 * time.Millisecond)
	c := admission.Call{Ctx: context.Background(), Method: "/svc/Call", Now: now, Deadline: now.Add(time.Second)}
	d := g.Admit(c)
	if d.Refused {
		t.Fatalf("Admit = %+v", d)
	}
	if d = g.Start(c, d.Permit); d.Refused {
		t.Fatalf("a 1s deadline against a stale 1.5s: Start = %+v, want admitted", d)
	}
	g.Finish(c, d.Permit, admission.Outcome{Duration: time.Millisecond})
}

// A call about to run on its turn is judged against the flow's service
// time without contention, not a mean that calls run beyond the limit
// stretched: 10ms calls whose mean grew to 500ms while fifty of them
// shared the processor still admit a call with 300ms left.
func TestDeadlineJudgedAgainstTheBaseline(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := mustNew(t, withClock(func() time.Time { return now }), WithBounds(64, 64))
	f := l.Flow("/svc/Call")
	l.upd.Lock()
	f.setBase(float64(10 * time.Millisecond))
	l.upd.Unlock()
	for range 50 {
		tk, ok := f.TryAcquire(now)
		if !ok {
			t.Fatal("no turn")
		}
		tk.Done(now.Add(500*time.Millisecond), false)
	}
	now = now.Add(500 * time.Millisecond)
	if st := f.ServiceTime(); st < 300*time.Millisecond {
		t.Fatalf("mean service time %v after fifty calls of 500ms, want over 300ms", st)
	}
	b := f.Baseline()
	if b <= 0 || b >= 300*time.Millisecond {
		t.Fatalf("baseline %v after the calls, want it learned and under 300ms (the test sets 10ms)", b)
	}
	if st := f.ServiceTimeAt(now); st != b {
		t.Errorf("ServiceTimeAt = %v, want the baseline %v", st, b)
	}
	g := NewGuard("run", l).(interface {
		admission.Guard
		admission.Starter
	})
	c := admission.Call{Ctx: context.Background(), Method: "/svc/Call", Now: now, Deadline: now.Add(300 * time.Millisecond)}
	d := g.Admit(c)
	if d.Refused {
		t.Fatalf("Admit = %+v", d)
	}
	if d = g.Start(c, d.Permit); d.Refused {
		t.Fatalf("300ms left against a stretched mean of %v and a baseline of %v: Start = %+v, want admitted", f.ServiceTime(), b, d)
	}
	g.Finish(c, d.Permit, admission.Outcome{Duration: 10 * time.Millisecond})
	// A deadline shorter than the baseline itself cannot be met.
	c.Deadline = now.Add(b / 2)
	if d = g.Admit(c); d.Refused {
		t.Fatalf("Admit = %+v", d)
	}
	if d = g.Start(c, d.Permit); !d.Refused || !d.DeadlineTooShort {
		t.Errorf("%v left against a baseline of %v: Start = %+v, want refused as too short", b/2, b, d)
	}
	g.Finish(c, d.Permit, admission.Outcome{Skipped: true})
}

// Limiter.Baseline reads a flow's baseline by name and creates no flow.
func TestLimiterBaselineCreatesNoFlow(t *testing.T) {
	l := mustNew(t)
	before := len(l.allFlows())
	if got := l.Baseline("/svc/None"); got != 0 {
		t.Errorf("Baseline of a flow never used = %v, want 0", got)
	}
	if n := len(l.allFlows()); n != before {
		t.Errorf("%d flows after Baseline of an unknown name, want %d as before", n, before)
	}
	f := l.Flow("/svc/Call")
	l.upd.Lock()
	f.setBase(float64(7 * time.Millisecond))
	l.upd.Unlock()
	if got := l.Baseline("/svc/Call"); got != 7*time.Millisecond {
		t.Errorf("Baseline(/svc/Call) = %v, want 7ms", got)
	}
}

// TestGuardPlacesLapse: a call admitted at its headers holds a place in
// its lane, not counted as waiting, until its handler asks for its turn
// or two of the Limiter's intervals pass (a request body the client sends
// late); a lapsed place is judged again at Start and given back once,
// whichever way the call ends.
func TestGuardPlacesLapse(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Millisecond), WithInterval(10*time.Millisecond))
	g := NewGuard("run", l)
	st := g.(admission.Starter)
	f := l.Flow("/s/M")
	now := time.Now()
	c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: now}
	var ps []admission.Permit
	for range 3 {
		d := g.Admit(c)
		if d.Refused {
			t.Fatalf("Admit = %+v", d)
		}
		ps = append(ps, d.Permit)
	}
	ln := crit(f)
	if n, w := ln.count.Load(), ln.Waiting(); n != 3 || w != 0 {
		t.Fatalf("3 admitted: %d places, %d waiting; want 3, 0", n, w)
	}
	// Within the interval after its own, a place is still the call's.
	c.Now = now.Add(10 * time.Millisecond)
	d := st.Start(c, ps[0])
	if d.Refused || d.Permit.Value&turn == 0 {
		t.Fatalf("Start within an interval = %+v, want a turn", d)
	}
	if n := ln.count.Load(); n != 2 {
		t.Errorf("one started: %d places, want 2", n)
	}
	// Two intervals later the others lapsed: a new call lapses them.
	c.Now = now.Add(30 * time.Millisecond)
	d2 := g.Admit(c)
	if d2.Refused {
		t.Fatalf("Admit after the places lapsed = %+v", d2)
	}
	if n, w := ln.count.Load(), ln.Waiting(); n != 1 || w != 0 {
		t.Errorf("after the lapse and one more admitted: %d places, %d waiting; want 1, 0", n, w)
	}
	g.Finish(c, d.Permit, admission.Outcome{Duration: time.Millisecond})
	// A lapsed call that starts is judged again and reserves anew; one
	// that never starts gives back nothing.
	if d := st.Start(c, ps[1]); d.Refused || d.Permit.Value&turn == 0 {
		t.Fatalf("Start of a lapsed call on a free turn = %+v, want a turn", d)
	} else {
		g.Finish(c, d.Permit, admission.Outcome{Duration: time.Millisecond})
	}
	g.Finish(c, ps[2], admission.Outcome{Skipped: true})
	g.Finish(c, d2.Permit, admission.Outcome{Skipped: true})
	if n, w, work := ln.count.Load(), ln.Waiting(), l.sh.Work(ln.class.Index()); n != 0 || w != 0 || work != 0 {
		t.Errorf("after every call: %d places, %d waiting, work %d; want 0, 0, 0", n, w, work)
	}
}

// TestGuardPlacesOfLateBodiesDoNotFillTheLane: a place the guard reserved
// in an earlier interval whose handler has not asked for its turn (a
// request body the client is late with) does not count in the lane's
// bound at admission, and a call re-judged as its handler asks for its
// turn (its own place lapsed) is not refused for others' places: with
// the lane full of such places and the CPU saturated, both used to be
// refused (RUN_QUEUE_FULL on the CPU's evidence) while no call waited.
func TestGuardPlacesOfLateBodiesDoNotFillTheLane(t *testing.T) {
	cpu := &fakeCPU{}
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Millisecond), WithInterval(10*time.Millisecond), WithCPU(cpu))
	g := NewGuard("run", l)
	st := g.(admission.Starter)
	now := time.Now()
	c := admission.Call{Ctx: context.Background(), Method: "/s/M", Now: now}
	f := l.Flow("/s/M")
	tk, _ := f.TryAcquire(now)
	tk.Done(now.Add(time.Millisecond), false) // a service time of 1ms
	hold, _ := f.TryAcquire(now)              // the one turn, taken
	var early []admission.Permit
	for range 10 {
		if d := g.Admit(c); !d.Refused {
			early = append(early, d.Permit)
		}
	}
	ln := crit(f)
	cpu.saturated = true
	if d := g.Admit(c); !d.Refused || d.Cause != admission.CauseRunQueueFull {
		t.Fatalf("Admit on a lane full of this interval's places, the CPU saturated = %+v, want RUN_QUEUE_FULL", d)
	}
	// The next interval: the places are still the calls', but their
	// handlers have not asked for a turn in an interval.
	c.Now = now.Add(10 * time.Millisecond)
	if w := ln.Waiting(); w != 0 {
		t.Fatalf("Waiting() = %d, want 0", w)
	}
	late := g.Admit(c)
	if late.Refused {
		t.Fatalf("Admit with the lane holding only the last interval's places (%d), no call waiting = %+v, want admitted", ln.Held(), late)
	}
	// Two intervals on, the early places lapsed; a fresh batch fills the
	// lane; an early call whose body came at last asks for its turn.
	c.Now = now.Add(30 * time.Millisecond)
	var fresh []admission.Permit
	for range 10 {
		if d := g.Admit(c); !d.Refused {
			fresh = append(fresh, d.Permit)
		}
	}
	if len(fresh) == 0 || len(fresh) == 10 {
		t.Fatalf("a fresh batch of 10 on a saturated CPU: %d admitted, want the lane's bound", len(fresh))
	}
	hold.Done(c.Now, false) // the turn is free
	d := st.Start(c, early[0])
	if d.Refused || d.Permit.Value&turn == 0 {
		t.Fatalf("Start of a call whose place lapsed, on a free turn, beside %d places not asked for and no call waiting = %+v, want the turn", ln.Held(), d)
	}
	g.Finish(c, d.Permit, admission.Outcome{Duration: time.Millisecond})
	for _, p := range append(append(early[1:], fresh...), late.Permit) {
		g.Finish(c, p, admission.Outcome{Skipped: true})
	}
	if n, w := ln.count.Load(), ln.Waiting(); n != 0 || w != 0 {
		t.Errorf("after every call: %d places, %d waiting; want 0, 0", n, w)
	}
}

// TestTicketFitsInRegisters: a Ticket has at most four fields, the most
// the compiler keeps in registers (cmd/compile's ssa.CanSSA); a fifth
// made it live in memory in every function that takes a turn, which
// slowed every admitted call (docs/cost.md, "A fifth field").
func TestTicketFitsInRegisters(t *testing.T) {
	if n := reflect.TypeFor[Ticket]().NumField(); n > 4 {
		t.Errorf("Ticket has %d fields, want at most 4: put flags in ticketFlags", n)
	}
}
