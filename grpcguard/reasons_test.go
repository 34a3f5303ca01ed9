package grpcguard

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/deadline"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/clock/clocktest"
	"github.com/levee-go/levee/internal/guardtest"
	"github.com/levee-go/levee/loadshed"
	"github.com/levee-go/levee/memshed"
	"github.com/levee-go/levee/queuedelay"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/runlimit"
)

// fixed refuses every call with d, as the guard whose refusal it copies
// would (its Cause, Evidence and figures): for the guards whose refusal
// takes an overloaded server to force (runlimit, memshed, queuedelay).
type fixed struct {
	name string
	d    admission.Decision
}

func (g fixed) Name() string                                               { return g.name }
func (g fixed) Admit(admission.Call) admission.Decision                    { return g.d }
func (g fixed) Finish(admission.Call, admission.Permit, admission.Outcome) {}

// zeroScale is a loadshed.Scaler that sheds every call.
type zeroScale struct{}

func (zeroScale) Scale() float64 { return 0 }

// wireRefusal is what a client reads of a refusal.
type wireRefusal struct {
	code     codes.Code
	info     *errdetails.ErrorInfo
	retry    time.Duration
	hasRetry bool
	quota    bool
	pushback []string
}

func readRefusal(err error, trailer metadata.MD) wireRefusal {
	st := status.Convert(err)
	w := wireRefusal{code: st.Code(), pushback: trailer.Get(PushbackTrailer)}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			w.info = d
		case *errdetails.RetryInfo:
			w.retry, w.hasRetry = d.GetRetryDelay().AsDuration(), true
		case *errdetails.QuotaFailure:
			w.quota = true
		}
	}
	return w
}

// TestEveryReasonOnTheWire forces a refusal for each reason, through the
// tap and through the interceptors, over a real grpc-go client on
// loopback, and checks what the client reads: the code, the ErrorInfo
// (domain levee, reason, guard, evidence and its figures), RetryInfo and,
// from the interceptors, the pushback trailer.
func TestEveryReasonOnTheWire(t *testing.T) {
	runQueueFull := admission.RefuseFor(admission.CauseRunQueueFull, admission.EvidenceCPU, runlimit.ReasonQueueFull, 20*time.Millisecond)
	runQueueFull.Value, runQueueFull.Threshold = 0.973, 0.95
	waitExpired := admission.RefuseFor(admission.CauseRunWaitExpired, admission.EvidenceStanding, runlimit.ReasonTimeout, 20*time.Millisecond)
	waitExpired.Threshold = 1000
	tooLate := admission.Decision{Refused: true, Reason: runlimit.ReasonTooLate, DeadlineTooShort: true,
		Cause: admission.CauseDeadlineTooShort, Evidence: admission.EvidenceServiceTime, Threshold: 31}
	memory := admission.RefuseFor(admission.CauseMemoryOverloaded, admission.EvidenceMemory, memshed.ReasonMemory, 250*time.Millisecond)
	memory.Value, memory.Threshold = 0.91, 0.85
	queued := admission.RefuseFor(admission.CauseQueueDelay, admission.EvidenceQueueDelay, queuedelay.Reason, 100*time.Millisecond)
	queued.Threshold = 5

	tests := []struct {
		name   string
		guard  func(t *testing.T) admission.Guard
		key    decide.KeyFunc
		admits int // calls admitted before the refusal
		hold   bool

		code      codes.Code
		reason    decide.Reason
		md        map[string]string
		retry     time.Duration // 0: no RetryInfo
		quota     bool
		pushback0 string // the interceptors' trailer
	}{
		{name: "run queue full", guard: func(*testing.T) admission.Guard { return fixed{"run", runQueueFull} },
			code: codes.ResourceExhausted, reason: decide.ReasonRunQueueFull,
			md:    map[string]string{"guard": "run", "evidence": "cpu", "value": "0.97", "threshold": "0.95"},
			retry: 20 * time.Millisecond, pushback0: "20"},
		{name: "run wait expired", guard: func(*testing.T) admission.Guard { return fixed{"run", waitExpired} },
			code: codes.ResourceExhausted, reason: decide.ReasonRunWaitExpired,
			md:    map[string]string{"guard": "run", "evidence": "standing", "threshold": "1000"},
			retry: 20 * time.Millisecond, pushback0: "20"},
		{name: "deadline too short (run limit)", guard: func(*testing.T) admission.Guard { return fixed{"run", tooLate} },
			code: codes.DeadlineExceeded, reason: decide.ReasonDeadlineTooShort,
			md: map[string]string{"guard": "run", "evidence": "service_time", "threshold": "31"}, pushback0: "-1"},
		{name: "deadline too short (deadline guard)", guard: func(t *testing.T) admission.Guard {
			g, err := deadline.New(deadline.WithMargin(1e6)) // a minute is too short once 1ms is learned
			if err != nil {
				t.Fatal(err)
			}
			g.Finish(admission.Call{Method: emptyCall, Now: time.Now()}, admission.Permit{}, admission.Outcome{Duration: time.Millisecond})
			return g
		}, code: codes.DeadlineExceeded, reason: decide.ReasonDeadlineTooShort,
			md: map[string]string{"guard": "deadline", "evidence": "service_time", "threshold": "1e+06"}, pushback0: "-1"},
		{name: "CPU overloaded", guard: func(*testing.T) admission.Guard { return loadshed.NewGuard("cpu", zeroScale{}, 100*time.Millisecond) },
			code: codes.ResourceExhausted, reason: decide.ReasonCPUOverloaded,
			md:    map[string]string{"guard": "cpu", "evidence": "cpu"},
			retry: 100 * time.Millisecond, pushback0: "100"},
		{name: "memory overloaded", guard: func(*testing.T) admission.Guard { return fixed{"memory", memory} },
			code: codes.ResourceExhausted, reason: decide.ReasonMemoryOverloaded,
			md:    map[string]string{"guard": "memory", "evidence": "memory", "value": "0.91", "threshold": "0.85"},
			retry: 250 * time.Millisecond, pushback0: "250"},
		{name: "rate limited", guard: func(t *testing.T) admission.Guard {
			return ratelimit.NewGuard("rate", mustLimiter(t, ratelimit.Every(time.Hour), 1))
		}, admits: 1, code: codes.ResourceExhausted, reason: decide.ReasonRateLimited,
			md: map[string]string{"guard": "rate", "evidence": "limit"}, retry: time.Hour, pushback0: "3600000"},
		{name: "per-key limited", guard: func(t *testing.T) admission.Guard {
			return ratelimit.NewKeyedGuard("tenant", mustKeyed(t, ratelimit.Every(time.Hour), 1, ratelimit.WithSweepInterval(0)))
		}, key: decide.HeaderKey("x-tenant-id"), admits: 1, code: codes.ResourceExhausted, reason: decide.ReasonPerKeyLimited,
			md: map[string]string{"guard": "tenant", "evidence": "limit"}, quota: true, retry: time.Hour, pushback0: "3600000"},
		{name: "concurrency limited", guard: func(t *testing.T) admission.Guard {
			return bulkhead.NewGuard("slots", mustBulkhead(t, 1), 5*time.Millisecond)
		}, hold: true, code: codes.ResourceExhausted, reason: decide.ReasonConcurrencyLimited,
			md: map[string]string{"guard": "slots", "evidence": "limit"}, retry: 5 * time.Millisecond, pushback0: "5"},
		{name: "queue delay exceeded", guard: func(*testing.T) admission.Guard { return fixed{"queue", queued} },
			code: codes.ResourceExhausted, reason: decide.ReasonQueueDelayExceeded,
			md: map[string]string{"guard": "queue", "evidence": "queue_delay", "threshold": "5"}, retry: 100 * time.Millisecond, pushback0: "100"},
		{name: "a guard that names no cause", guard: func(*testing.T) admission.Guard { return &refuseAll{} },
			code: codes.ResourceExhausted, reason: decide.ReasonOverloaded,
			md: map[string]string{"guard": "full", "evidence": "none"}, retry: 50 * time.Millisecond, pushback0: "50"},
	}
	for _, mode := range []string{"tap", "interceptors"} {
		for _, tt := range tests {
			s := mustServer(t, []decide.Rule{{Key: tt.key, Tenant: decide.HeaderKey("x-tenant-id"), Guards: []admission.Guard{tt.guard(t)}}})
			s.clock.Fake = clocktest.New(time.Now()).Now // buckets refill not at all
			var seen []decide.RefusalEvent
			var seenMu sync.Mutex
			s.Engine().SetObserver(decide.Observer{RefusalsPerSecond: -1, OnRefusal: func(ev decide.RefusalEvent) {
				seenMu.Lock()
				seen = append(seen, ev)
				seenMu.Unlock()
			}})
			opts := s.ServerOptions()
			if mode == "interceptors" {
				opts = interceptorsOnly(s)
			}
			if tt.hold {
				hold, cancel := context.WithCancel(context.Background())
				if _, err := s.TapHandle(hold, &tap.Info{FullMethodName: emptyCall}); err != nil {
					t.Fatalf("%s: TapHandle holding the slot: %v", tt.name, err)
				}
				t.Cleanup(cancel)
			}
			env := startServer(t, &testService{}, true, opts)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant-id", "acme")
			for i := range tt.admits {
				if _, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
					t.Fatalf("%s, %s: call %d = %v, want admitted", mode, tt.name, i, err)
				}
			}
			var tr metadata.MD
			_, err := env.client.EmptyCall(ctx, &testgrpc.Empty{}, grpc.Trailer(&tr))
			cancel()
			got := readRefusal(err, tr)
			if got.code != tt.code {
				t.Errorf("%s, %s: code %v (%v), want %v", mode, tt.name, got.code, err, tt.code)
			}
			if got.info == nil {
				t.Errorf("%s, %s: no ErrorInfo in %v", mode, tt.name, err)
				continue
			}
			if got.info.GetDomain() != "levee" || got.info.GetReason() != string(tt.reason) {
				t.Errorf("%s, %s: ErrorInfo %s/%s, want levee/%s", mode, tt.name, got.info.GetDomain(), got.info.GetReason(), tt.reason)
			}
			if md := got.info.GetMetadata(); len(md) != len(tt.md) {
				t.Errorf("%s, %s: ErrorInfo metadata %v, want %v", mode, tt.name, md, tt.md)
			} else {
				for k, v := range tt.md {
					if md[k] != v {
						t.Errorf("%s, %s: ErrorInfo metadata[%q] = %q, want %q", mode, tt.name, k, md[k], v)
					}
				}
			}
			if got.hasRetry != (tt.retry > 0) || got.retry != tt.retry {
				t.Errorf("%s, %s: RetryInfo %v (present %t), want %v", mode, tt.name, got.retry, got.hasRetry, tt.retry)
			}
			if got.quota != tt.quota {
				t.Errorf("%s, %s: QuotaFailure present %t, want %t", mode, tt.name, got.quota, tt.quota)
			}
			wantPB := []string(nil)
			if mode == "interceptors" && tt.pushback0 != "" {
				wantPB = []string{tt.pushback0}
			}
			if len(got.pushback) != len(wantPB) || len(wantPB) == 1 && got.pushback[0] != wantPB[0] {
				t.Errorf("%s, %s: pushback %q, want %q", mode, tt.name, got.pushback, wantPB)
			}
			// The operator's side: one refusal counted by guard, reason
			// and evidence, and the Observer told of it.
			counts := s.Engine().RefusalCounts()
			if len(counts) != 1 || counts[0].Guard != tt.md["guard"] || counts[0].Reason != tt.reason ||
				counts[0].Evidence.String() != tt.md["evidence"] || counts[0].Count != 1 {
				t.Errorf("%s, %s: RefusalCounts() = %+v, want one refusal by %s, %s on %s", mode, tt.name, counts, tt.md["guard"], tt.reason, tt.md["evidence"])
			}
			seenMu.Lock()
			if len(seen) != 1 || seen[0].Method != emptyCall || seen[0].Tenant != "acme" || seen[0].Class != admission.Critical ||
				seen[0].Reason != tt.reason || seen[0].Guard != tt.md["guard"] {
				t.Errorf("%s, %s: Observer told %+v, want one refusal of %s for tenant acme by %s (%s)", mode, tt.name, seen, emptyCall, tt.md["guard"], tt.reason)
			}
			seenMu.Unlock()
		}
	}
}

// TestStreamCapReasonOnTheWire: a stream beyond the open-stream cap is
// refused with TOO_MANY_STREAMS.
func TestStreamCapReasonOnTheWire(t *testing.T) {
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{&recorder{}}}}, WithStreamLimits(1, 0))
	env := startServer(t, &testService{}, true, s.ServerOptions())
	got, err := secondStream(t, env)
	if got.code != codes.ResourceExhausted || got.info == nil || got.info.GetReason() != string(decide.ReasonTooManyStreams) ||
		got.info.GetMetadata()["guard"] != StreamGuardName || got.info.GetMetadata()["evidence"] != "limit" {
		t.Fatalf("second stream: %v, ErrorInfo %v; want RESOURCE_EXHAUSTED, TOO_MANY_STREAMS by %q on limit", err, got.info, StreamGuardName)
	}
	if got.retry != streamRetryAfter || len(got.pushback) != 1 || got.pushback[0] != "1000" {
		t.Errorf("second stream: RetryInfo %v, pushback %q; want %v and [1000]", got.retry, got.pushback, streamRetryAfter)
	}
	want := []decide.RefusalCount{{Guard: StreamGuardName, Reason: decide.ReasonTooManyStreams, Evidence: admission.EvidenceLimit, Count: 1}}
	if counts := s.Engine().RefusalCounts(); len(counts) != 1 || counts[0] != want[0] {
		t.Errorf("RefusalCounts() = %+v, want %+v", counts, want)
	}
}

// TestTapRefusalAtAFullStreamCapIsAnsweredOnce: a stream the tap refuses
// but lets through for the interceptor to answer (a deadline beyond
// TapRefusalHorizon; sustained overload, to a client that retries) finds
// the open-stream cap full: it is answered with the tap's refusal, which
// the tap recorded, and counted once. Before, the cap refused it again:
// one call was two refusals in levee_refusals_total, and the client read
// the cap's refusal and its pushback of 1s (under sustained overload,
// instead of -1, "do not retry").
func TestTapRefusalAtAFullStreamCapIsAnsweredOnce(t *testing.T) {
	for _, tt := range []struct {
		name      string
		sustained bool
	}{
		{"far deadline", false},
		{"sustained overload", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fg := &guardtest.Forced{}
			s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{fg}}}, WithStreamLimits(1, 0))
			clk := clocktest.New(time.Now())
			s.clock.Fake = clk.Now
			env := startServer(t, &testService{}, true, s.ServerOptions())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := openStream(ctx, env.client); err != nil { // fills the cap
				t.Fatal(err)
			}
			fg.Set(admission.RefuseFor(admission.CauseRateLimited, admission.EvidenceLimit, "no", 300*time.Millisecond), admission.Decision{})
			refusals := uint64(0)
			callCtx, cancelCall := context.WithTimeout(context.Background(), TapRefusalHorizon+time.Minute)
			defer cancelCall()
			wantPushback, wantReason := "300", decide.ReasonRateLimited
			if tt.sustained {
				// A retry attempt, with a deadline within the horizon, after
				// 1.2s of refusals 100ms apart: sustained.
				callCtx = metadata.AppendToOutgoingContext(ctx, decide.PreviousAttemptsHeader, "1")
				for range 12 {
					_, _ = env.client.EmptyCall(callCtx, &testgrpc.Empty{})
					refusals++
					clk.Advance(100 * time.Millisecond)
				}
				wantPushback, wantReason = "-1", decide.ReasonSustainedOverload
			}
			stream, err := env.client.FullDuplexCall(callCtx)
			if err == nil {
				_, err = stream.Recv()
			}
			got := readRefusal(err, stream.Trailer())
			if got.code != codes.ResourceExhausted || got.info.GetReason() != string(wantReason) || got.info.GetMetadata()["guard"] != "forced" ||
				len(got.pushback) != 1 || got.pushback[0] != wantPushback {
				t.Errorf("stream refused by the tap, at a full cap: %v, %v, pushback %q; want RESOURCE_EXHAUSTED, %s by forced, pushback [%s]", err, got.info, got.pushback, wantReason, wantPushback)
			}
			refusals++
			var n uint64
			for _, c := range s.RefusalCounts() {
				n += c.Count
				if c.Guard == StreamGuardName {
					t.Errorf("the cap counted a refusal of its own: %+v", c)
				}
			}
			if n != refusals {
				t.Errorf("RefusalCounts() = %+v: %d refusals, want %d, each call's once", s.RefusalCounts(), n, refusals)
			}
			if st := s.StreamStats(); st.Open != 1 || st.Refused != 0 {
				t.Errorf("StreamStats() = %+v, want the held stream open and none refused by the cap", st)
			}
		})
	}
}

// secondStream opens a stream on env and, while it is open, a second one,
// and returns how the second was refused (failing t if it was not).
func secondStream(t *testing.T, env *testEnv) (wireRefusal, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open, err := env.client.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := open.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := open.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	second, err := env.client.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = second.Recv()
	if err == io.EOF || err == nil {
		t.Fatalf("second stream beyond the cap of 1: %v, want refused", err)
	}
	return readRefusal(err, second.Trailer()), err
}

// TestSustainedReasonOnTheWire: once refusals are sustained, a refusal
// says SUSTAINED_OVERLOAD, with the guard's own reason as its cause, and
// a pushback of -1.
func TestSustainedReasonOnTheWire(t *testing.T) {
	s := mustServer(t, []decide.Rule{{Guards: []admission.Guard{fixed{"run", admission.RefuseFor(admission.CauseRunQueueFull, admission.EvidenceSpike, runlimit.ReasonQueueFull, 20*time.Millisecond)}}}})
	clk := clocktest.New(time.Now())
	s.clock.Fake = clk.Now
	env := startServer(t, &testService{}, true, s.ServerOptions())
	retry := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(decide.PreviousAttemptsHeader, "1"))
	var got wireRefusal
	for range 12 { // 1.2s of refusals, 100ms apart
		var tr metadata.MD
		_, err := env.client.EmptyCall(retry, &testgrpc.Empty{}, grpc.Trailer(&tr))
		got = readRefusal(err, tr)
		clk.Advance(100 * time.Millisecond)
	}
	md := got.info.GetMetadata()
	if got.code != codes.ResourceExhausted || got.info.GetReason() != string(decide.ReasonSustainedOverload) ||
		md["cause"] != string(decide.ReasonRunQueueFull) || md["evidence"] != "spike" || md["guard"] != "run" {
		t.Errorf("sustained refusal: %v %v; want RESOURCE_EXHAUSTED, SUSTAINED_OVERLOAD caused by RUN_QUEUE_FULL on spike", got.code, got.info)
	}
	if !got.hasRetry || got.retry != 20*time.Millisecond || len(got.pushback) != 1 || got.pushback[0] != "-1" {
		t.Errorf("sustained refusal: RetryInfo %v, pushback %q; want 20ms and [-1]", got.retry, got.pushback)
	}
	// Each refusal counted once, by the reason the client read: the
	// first half second's as RUN_QUEUE_FULL, the rest as
	// SUSTAINED_OVERLOAD.
	var total, sustained uint64
	for _, c := range s.Engine().RefusalCounts() {
		total += c.Count
		if c.Reason == decide.ReasonSustainedOverload {
			sustained += c.Count
		}
	}
	if total != 12 || sustained == 0 || sustained == 12 {
		t.Errorf("RefusalCounts() = %+v, want 12 refusals, some of them SUSTAINED_OVERLOAD", s.Engine().RefusalCounts())
	}
}
