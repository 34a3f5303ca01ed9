package httpguard

import (
	"math"
	"net/http"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

func statusWith(t *testing.T, delays ...*durationpb.Duration) *spb.Status {
	t.Helper()
	st := &spb.Status{Code: 8, Message: "levee: run: busy"}
	info, err := anypb.New(&errdetails.ErrorInfo{Reason: "RUN_QUEUE_FULL", Domain: "levee"})
	if err != nil {
		t.Fatal(err)
	}
	st.Details = append(st.Details, info)
	for _, d := range delays {
		a, err := anypb.New(&errdetails.RetryInfo{RetryDelay: d})
		if err != nil {
			t.Fatal(err)
		}
		st.Details = append(st.Details, a)
	}
	return st
}

func TestSetRetryAfter(t *testing.T) {
	tests := []struct {
		name string
		give *spb.Status
		want string
	}{
		{"nil status", nil, ""},
		{"no RetryInfo", statusWith(t), ""},
		{"sub-second", statusWith(t, durationpb.New(20*time.Millisecond)), "1"},
		{"rounded up", statusWith(t, durationpb.New(2500*time.Millisecond)), "3"},
		{"zero", statusWith(t, durationpb.New(0)), ""},
		{"negative", statusWith(t, durationpb.New(-time.Second)), ""},
		{"mixed signs", statusWith(t, &durationpb.Duration{Seconds: 1, Nanos: -5}), ""},
		{"nanos out of range", statusWith(t, &durationpb.Duration{Seconds: 1, Nanos: 2e9}), ""},
		{"malformed, then valid", statusWith(t, &durationpb.Duration{Nanos: -1}, durationpb.New(4*time.Second)), "4"},
		{"beyond a Duration", statusWith(t, &durationpb.Duration{Seconds: math.MaxInt64}), ""},
		{"nil delay", statusWith(t, nil), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			set := SetRetryAfter(h, tt.give)
			if got := h.Get(RetryAfterHeader); got != tt.want || set != (tt.want != "") {
				t.Errorf("SetRetryAfter(%v) = %v, Retry-After %q; want %v, %q", tt.give, set, got, tt.want != "", tt.want)
			}
		})
	}
}
