package grpcguard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// checkRefusal fails t unless st is the status of a refusal by guard
// with d and code: its code, message, ErrorInfo and RetryInfo, and a QuotaFailure
// for key when d is per key.
func checkRefusal(t *testing.T, st *status.Status, code codes.Code, guard string, d admission.Decision, key string) {
	t.Helper()
	if d.DeadlineTooShort {
		code = codes.DeadlineExceeded
	}
	if want := "levee: " + guard + ": " + d.Reason; st.Code() != code || st.Message() != want {
		t.Fatalf("status %v %q, want %v %q", st.Code(), st.Message(), code, want)
	}
	var retry time.Duration
	var subject string
	var info *errdetails.ErrorInfo
	for _, det := range st.Details() {
		switch det := det.(type) {
		case *errdetails.ErrorInfo:
			info = det
		case *errdetails.RetryInfo:
			retry = det.GetRetryDelay().AsDuration()
		case *errdetails.QuotaFailure:
			subject = det.GetViolations()[0].GetSubject()
		}
	}
	wantRetry := d.RetryAfter
	if wantRetry == admission.Never || wantRetry < 0 {
		wantRetry = 0
	}
	if retry != wantRetry {
		t.Fatalf("%q: RetryInfo %v, want %v", st.Message(), retry, wantRetry)
	}
	wantReason := decide.NewRefusal(0, guard, d, key).Reason
	if info.GetDomain() != decide.ErrorDomain || info.GetReason() != string(wantReason) || info.GetMetadata()["guard"] != guard || info.GetMetadata()["evidence"] != d.Evidence.String() {
		t.Fatalf("%q: ErrorInfo %v, want %s/%s naming guard %q and evidence %q", st.Message(), info, decide.ErrorDomain, wantReason, guard, d.Evidence)
	}
	if want := map[bool]string{true: key}[d.PerKey]; subject != want {
		t.Fatalf("%q: QuotaFailure subject %q, want %q", st.Message(), subject, want)
	}
}

// TestRefusalStatusReused: the same refusal twice gets the same status,
// built once; any other refusal gets its own, whichever slot it shares,
// and a per-key refusal always names its key.
func TestRefusalStatusReused(t *testing.T) {
	ctx := context.Background()
	d := admission.Decision{Refused: true, Reason: "too many calls waiting", RetryAfter: 5 * time.Millisecond}
	a := refusalOf(ctx, codes.ResourceExhausted, "run", d, "")
	if b := refusalOf(ctx, codes.ResourceExhausted, "run", d, ""); b != a {
		t.Error("the same refusal twice: two statuses, want the first reused")
	}
	checkRefusal(t, a, codes.ResourceExhausted, "run", d, "")
	if n := testing.AllocsPerRun(100, func() { refusalOf(ctx, codes.ResourceExhausted, "run", d, "") }); n != 0 {
		t.Errorf("a refusal already built: %v allocations, want 0", n)
	}

	// More refusals than slots, each twice in a row and again after the
	// others: every status is the one asked for.
	var ds []admission.Decision
	for i := range 40 {
		ds = append(ds, admission.Decision{Refused: true, Reason: fmt.Sprintf("reason %d", i%5), RetryAfter: time.Duration(i%8) * time.Millisecond,
			DeadlineTooShort: i%7 == 0})
	}
	ds = append(ds, admission.Decision{Refused: true, Reason: "never", RetryAfter: admission.Never})
	for range 2 {
		for i, d := range ds {
			guard := fmt.Sprintf("guard%d", i%3)
			code := []codes.Code{codes.ResourceExhausted, codes.Unavailable}[i%2]
			for range 2 {
				checkRefusal(t, refusalOf(ctx, code, guard, d, ""), code, guard, d, "")
			}
		}
	}
	for _, key := range []string{"acme", "globex", "acme"} {
		d := admission.Decision{Refused: true, Reason: "over share", RetryAfter: time.Second, PerKey: true}
		checkRefusal(t, refusalOf(ctx, codes.ResourceExhausted, "tenant", d, key), codes.ResourceExhausted, "tenant", d, key)
	}
}

// TestRefusalStatusConcurrent: goroutines refusing with different
// decisions at once each get their own status.
func TestRefusalStatusConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				d := admission.Decision{Refused: true, Reason: fmt.Sprintf("r%d", (g+i)%6), RetryAfter: time.Duration((g*i)%9) * time.Millisecond}
				st := refusalOf(context.Background(), codes.ResourceExhausted, "rate", d, "")
				if st.Message() != "levee: rate: "+d.Reason {
					t.Errorf("got %q for %q", st.Message(), d.Reason)
					return
				}
				var retry time.Duration
				for _, det := range st.Details() {
					if ri, ok := det.(*errdetails.RetryInfo); ok {
						retry = ri.GetRetryDelay().AsDuration()
					}
				}
				if retry != d.RetryAfter {
					t.Errorf("%q: RetryInfo %v, want %v", d.Reason, retry, d.RetryAfter)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkRefusalStatus: a refusal's status built anew against the one
// reused, with its error as the tap returns it.
func BenchmarkRefusalStatus(b *testing.B) {
	ctx := context.Background()
	d := admission.Decision{Refused: true, Reason: "too many calls waiting for a turn to run", RetryAfter: 5 * time.Millisecond}
	b.Run("built", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = buildRefusal(decide.NewRefusal(decide.ResourceExhausted, "run", d, "")).Err()
		}
	})
	b.Run("reused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = refusalOf(ctx, codes.ResourceExhausted, "run", d, "").Err()
		}
	})
}

// refusalOf is the status of a refusal by guard of a rule with code,
// decided d, of key.
func refusalOf(ctx context.Context, code codes.Code, guard string, d admission.Decision, key string) *status.Status {
	return refusalStatus(ctx, decide.NewRefusal(decide.Code(code), guard, d, key))
}
