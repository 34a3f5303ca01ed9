package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWaitRefundAfterReconfigs: a Wait cancelled after Set calls gives
// back the one token it reserved, in the configuration in force, as
// RefundAt does, whatever the number of changes. It used to key its
// refund on the 2-bit configuration generation: with one to three changes
// it gave nothing back, and after exactly four the generation had
// wrapped to the waiter's and it gave back the reservation's cost in the
// old configuration's nanoseconds, here an hour of debt in a bucket that
// refills every minute: the whole bucket, the earlier Allow's token too.
func TestWaitRefundAfterReconfigs(t *testing.T) {
	for _, changes := range []int{1, 3, 4, 5} {
		lim := mustLimiter(t, Every(time.Hour), 1)
		if !lim.Allow() {
			t.Fatal("first Allow refused")
		}
		c, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- lim.Wait(c) }()
		deadline := time.Now().Add(5 * time.Second)
		for lim.Tokens(time.Now()) > -0.5 {
			if time.Now().After(deadline) {
				t.Fatal("waiter never reserved")
			}
			time.Sleep(time.Millisecond)
		}
		// Slower and slower, then faster: the last configuration refills
		// a token a minute, and stays in debt.
		rates := []Limit{Every(2 * time.Hour), Every(3 * time.Hour), Every(4 * time.Hour), Every(5 * time.Hour)}
		rates = append(rates[:changes-1], Every(time.Minute))
		for _, r := range rates {
			if err := lim.SetLimit(r); err != nil {
				t.Fatal(err)
			}
		}
		before := lim.Tokens(time.Now())
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
		after := lim.Tokens(time.Now())
		t.Logf("%d changes: tokens before cancel %.3f, after %.3f", changes, before, after)
		// The waiter reserved one token: giving it back may raise the
		// tokens by at most 1 (in the new config's units).
		if after < before+0.99 || after > before+1.01 {
			t.Errorf("%d reconfigurations during Wait: cancel moved tokens from %.3f to %.3f, want the one token reserved given back", changes, before, after)
		}
	}
}
