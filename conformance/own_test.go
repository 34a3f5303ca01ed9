package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/grpcguard"
)

// The cases of levee's own: a server that is not overloaded, and calls
// levee must neither refuse nor delay. Each runs in every configuration,
// against a fresh server and client, within ownTimeout. The client has
// no service config (pick_first, no ORCA stream), so that the only
// streams open are the case's own.

const ownTimeout = 30 * time.Second

// TestIdleStreams: with idleStreams idle bidi streams open on an idle
// server, every stream is admitted, and unary calls at a modest rate all
// succeed, about as fast as before the streams were opened.
func TestIdleStreams(t *testing.T) {
	forEachConfig(t, idleStreamsThenUnaryCalls)
}

// TestLongStreamThenShortDeadlines: after one stream of longStream,
// calls with a deadline of shortDeadline, which they need under a
// millisecond of, all succeed, on the stream's method and on a unary one.
func TestLongStreamThenShortDeadlines(t *testing.T) {
	forEachConfig(t, longStreamThenShortDeadlines)
}

// TestApplicationErrorsThenHealthyCalls: handlers that return plain Go
// errors (UNKNOWN), UNKNOWN and INVALID_ARGUMENT, and then healthy
// calls: every call reaches the server and gets the handler's answer, no
// call is refused on the client (no throttle drop, no open breaker).
func TestApplicationErrorsThenHealthyCalls(t *testing.T) {
	forEachConfig(t, applicationErrorsThenHealthyCalls)
}

// TestStreamDeadlinePassesWhileIdle: streams whose deadline passes while
// the caller is doing something else (not in Send or Recv) end with
// DEADLINE_EXCEEDED, as without levee. Their contexts end before the
// caller sees their end, from the deadline's timer, which is the path of
// levee's client interceptor that finishes an abandoned stream
// (context.AfterFunc): the race detector watches it here.
func TestStreamDeadlinePassesWhileIdle(t *testing.T) {
	forEachConfig(t, streamDeadlinePassesWhileIdle)
}

func forEachConfig(t *testing.T, f func(ctx context.Context, e *env) error) {
	for _, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			e := start(t, cfg, "")
			run(t, ownTimeout, func(ctx context.Context) error { return f(ctx, e) })
		})
	}
}

const (
	idleStreams   = 1000
	openAtOnce    = 50                    // streams opened concurrently
	unaryInterval = 10 * time.Millisecond // between unary calls: 100 calls/s
	unaryCalls    = 100
	callTimeout   = time.Second
)

func idleStreamsThenUnaryCalls(ctx context.Context, e *env) error {
	before, err := unaryLatencies(ctx, e, unaryCalls/2, "with no stream open")
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streams := make([]testgrpc.TestService_FullDuplexCallClient, idleStreams)
	var g errgroup.Group
	g.SetLimit(openAtOnce)
	for i := range streams {
		g.Go(func() error {
			s, err := e.tc.FullDuplexCall(sctx)
			if err != nil {
				return fmt.Errorf("idle stream %d of %d: FullDuplexCall() = %v", i+1, idleStreams, err)
			}
			if err := ping(s); err != nil {
				return fmt.Errorf("idle stream %d of %d: %v", i+1, idleStreams, err)
			}
			streams[i] = s
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	after, err := unaryLatencies(ctx, e, unaryCalls, fmt.Sprintf("with %d idle streams open", idleStreams))
	if err != nil {
		return err
	}
	// No extra wait: a call that waited for a turn an idle stream holds
	// waits the queue target or more (5ms at least) before it runs or is
	// refused; the median of a loopback call is well under a millisecond.
	if b, a := median(before), median(after); a > 2*b+5*time.Millisecond {
		return fmt.Errorf("unary calls with %d idle streams open took %v (median), want about what they took before (%v)", idleStreams, a, b)
	}
	for i, s := range streams {
		if err := s.CloseSend(); err != nil {
			return fmt.Errorf("idle stream %d: CloseSend() = %v", i+1, err)
		}
		if _, err := s.Recv(); err != io.EOF {
			return fmt.Errorf("idle stream %d: Recv() after CloseSend = %v, want io.EOF", i+1, err)
		}
	}
	return nil
}

// unaryLatencies makes n EmptyCalls, one every unaryInterval, and returns
// their latencies, or an error naming every call that failed.
func unaryLatencies(ctx context.Context, e *env, n int, when string) ([]time.Duration, error) {
	var lat []time.Duration
	var failed []error
	tick := time.NewTicker(unaryInterval)
	defer tick.Stop()
	for i := range n {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		start := time.Now()
		_, err := e.tc.EmptyCall(cctx, &testgrpc.Empty{})
		lat = append(lat, time.Since(start))
		cancel()
		if err != nil {
			failed = append(failed, fmt.Errorf("call %d: %v", i+1, err))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	if len(failed) > 0 {
		return nil, summarize(fmt.Sprintf("EmptyCall %s", when), n, failed)
	}
	return lat, nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// ping sends one message on s and reads its answer.
func ping(s testgrpc.TestService_FullDuplexCallClient) error {
	if err := s.Send(&testgrpc.StreamingOutputCallRequest{ResponseParameters: []*testgrpc.ResponseParameters{{Size: 1}}}); err == io.EOF {
		_, err := s.Recv() // the stream's status
		return fmt.Errorf("Send() = EOF, then Recv() = %v", err)
	} else if err != nil {
		return fmt.Errorf("Send() = %v", err)
	}
	if _, err := s.Recv(); err != nil {
		return fmt.Errorf("Recv() = %v", err)
	}
	return nil
}

const (
	longStream    = 1600 * time.Millisecond
	shortDeadline = 150 * time.Millisecond
	shortCalls    = 20
)

func longStreamThenShortDeadlines(ctx context.Context, e *env) error {
	// Both methods learn their service time first (well under 1ms).
	for i := range shortCalls {
		if err := shortStream(ctx, e, callTimeout); err != nil {
			return fmt.Errorf("warm-up stream %d: %v", i+1, err)
		}
		if err := unary(ctx, e, callTimeout); err != nil {
			return fmt.Errorf("warm-up UnaryCall %d: %v", i+1, err)
		}
	}
	s, err := e.tc.FullDuplexCall(ctx)
	if err != nil {
		return fmt.Errorf("long stream: FullDuplexCall() = %v", err)
	}
	if err := ping(s); err != nil {
		return fmt.Errorf("long stream: %v", err)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(longStream):
	}
	if err := ping(s); err != nil {
		return fmt.Errorf("long stream after %v: %v", longStream, err)
	}
	if err := s.CloseSend(); err != nil {
		return fmt.Errorf("long stream: CloseSend() = %v", err)
	}
	if _, err := s.Recv(); err != io.EOF {
		return fmt.Errorf("long stream: Recv() after CloseSend = %v, want io.EOF", err)
	}
	var streamFailed, unaryFailed []error
	for i := range shortCalls {
		if err := shortStream(ctx, e, shortDeadline); err != nil {
			streamFailed = append(streamFailed, fmt.Errorf("stream %d: %v", i+1, err))
		}
		if err := unary(ctx, e, shortDeadline); err != nil {
			unaryFailed = append(unaryFailed, fmt.Errorf("call %d: %v", i+1, err))
		}
	}
	return errors.Join(
		summarize(fmt.Sprintf("after a %v stream, FullDuplexCall streams with a %v deadline", longStream, shortDeadline), shortCalls, streamFailed),
		summarize(fmt.Sprintf("after a %v stream, UnaryCall with a %v deadline", longStream, shortDeadline), shortCalls, unaryFailed),
	)
}

// shortStream opens a FullDuplexCall stream with a deadline of d,
// exchanges one message and closes it.
func shortStream(ctx context.Context, e *env, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	s, err := e.tc.FullDuplexCall(ctx)
	if err != nil {
		return fmt.Errorf("FullDuplexCall() = %v", err)
	}
	if err := ping(s); err != nil {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return fmt.Errorf("CloseSend() = %v", err)
	}
	if _, err := s.Recv(); err != io.EOF {
		return fmt.Errorf("Recv() after CloseSend = %v, want io.EOF", err)
	}
	return nil
}

// unary makes one UnaryCall with a deadline of d.
func unary(ctx context.Context, e *env, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := e.tc.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 1})
	return err
}

const (
	errorRounds  = 20 // of each application error
	healthyCalls = 100
)

func applicationErrorsThenHealthyCalls(ctx context.Context, e *env) error {
	appErrors := []struct {
		name string
		req  *testgrpc.SimpleRequest
		want codes.Code
	}{
		// The interop handler returns fmt.Errorf for a negative size: a
		// plain Go error, which grpc-go sends as UNKNOWN.
		{"plain Go error", &testgrpc.SimpleRequest{ResponseSize: -1}, codes.Unknown},
		{"UNKNOWN", &testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.Unknown), Message: "application: unknown"}}, codes.Unknown},
		{"INVALID_ARGUMENT", &testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.InvalidArgument), Message: "application: invalid argument"}}, codes.InvalidArgument},
	}
	healthy := &testgrpc.SimpleRequest{ResponseSize: 1}
	call := func(req *testgrpc.SimpleRequest) error {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		_, err := e.tc.UnaryCall(cctx, req)
		return err
	}
	if err := call(healthy); err != nil {
		return fmt.Errorf("first healthy UnaryCall() = %v", err)
	}
	var wrong []error
	for i := range errorRounds {
		for _, a := range appErrors {
			if err := call(a.req); status.Code(err) != a.want || refusedLocally(err) {
				wrong = append(wrong, fmt.Errorf("round %d, %s: UnaryCall() = %v, want the handler's %v", i+1, a.name, err, a.want))
			}
		}
	}
	var refused []error
	for i := range healthyCalls {
		if err := call(healthy); err != nil {
			refused = append(refused, fmt.Errorf("call %d: %v", i+1, err))
		}
	}
	return errors.Join(
		summarize("application errors", errorRounds*len(appErrors), wrong),
		summarize(fmt.Sprintf("healthy UnaryCalls after %d application errors", errorRounds*len(appErrors)), healthyCalls, refused),
	)
}

// refusedLocally reports whether err is a refusal of levee's client
// interceptors: the call never left the process.
func refusedLocally(err error) bool {
	return err != nil && (errors.Is(err, grpcguard.ErrClientRefused) || strings.Contains(err.Error(), "levee: client"))
}

// summarize is nil when no call failed, else an error with the count and
// the first and last failures.
func summarize(what string, n int, failed []error) error {
	switch len(failed) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: 1 of %d failed: %v", what, n, failed[0])
	default:
		return fmt.Errorf("%s: %d of %d failed; first: %v; last: %v", what, len(failed), n, failed[0], failed[len(failed)-1])
	}
}

const (
	idleDeadline    = 50 * time.Millisecond
	idleDeadlineBy  = 100 * time.Millisecond // how long the caller is away
	deadlineStreams = 4                      // a few: TestIdleStreams is the one about many
)

func streamDeadlinePassesWhileIdle(ctx context.Context, e *env) error {
	streams := make([]testgrpc.TestService_FullDuplexCallClient, deadlineStreams)
	var last context.Context
	for i := range streams {
		sctx, cancel := context.WithTimeout(ctx, idleDeadline)
		defer cancel()
		last = sctx
		s, err := e.tc.FullDuplexCall(sctx)
		if err != nil {
			return fmt.Errorf("stream %d: FullDuplexCall() = %v", i+1, err)
		}
		if err := ping(s); err != nil {
			return fmt.Errorf("stream %d: %v", i+1, err)
		}
		streams[i] = s
	}
	<-last.Done()
	time.Sleep(idleDeadlineBy - idleDeadline)
	for i, s := range streams {
		if _, err := s.Recv(); status.Code(err) != codes.DeadlineExceeded {
			return fmt.Errorf("stream %d: Recv() %v after a %v deadline = %v, want DEADLINE_EXCEEDED", i+1, idleDeadlineBy, idleDeadline, err)
		}
	}
	return nil
}
