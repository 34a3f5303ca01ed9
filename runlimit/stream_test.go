package runlimit

import (
	"context"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// startStream admits and starts a stream of method through g.
func startStream(t *testing.T, g admission.Guard, method string, clientStream bool) (admission.Call, admission.Permit, admission.Decision) {
	t.Helper()
	c := admission.Call{Ctx: context.Background(), Method: method, Now: time.Now(), Stream: true, ClientStream: clientStream}
	d := g.Admit(c)
	if d.Refused {
		t.Fatalf("Admit(stream %s) refused: %+v", method, d)
	}
	c.Now = time.Now()
	s := g.(admission.Starter).Start(c, d.Permit)
	return c, s.Permit, s
}

// waitUntil polls cond for up to a second (a stream's hold runs on the
// real clock).
func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("after 1s: not %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestShortServerStreamIsLimitedAndLearned: a server-streaming call
// holds a turn from its start to its end, as a unary call does, and its
// time from the turn is its flow's service time.
func TestShortServerStreamIsLimitedAndLearned(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Hour))
	g := NewGuard("run", l)
	c, p, d := startStream(t, g, "/s/Feed", false)
	if d.Refused {
		t.Fatalf("Start(stream) refused: %+v", d)
	}
	if r := l.Running(); r != 1 {
		t.Errorf("Running() = %d with a server stream started, want 1", r)
	}
	time.Sleep(2 * time.Millisecond)
	g.Finish(c, p, admission.Outcome{})
	if r := l.Running(); r != 0 {
		t.Errorf("Running() = %d after the stream ended, want 0", r)
	}
	f := l.Flow("/s/Feed")
	if st := f.ServiceTime(); st < 2*time.Millisecond || st > time.Second {
		t.Errorf("Flow.ServiceTime() = %v after a stream of 2ms, want about 2ms", st)
	}
	if s := f.streamScore.Load(); s != -1 {
		t.Errorf("streamScore = %d after a stream that ended within its hold, want -1", s)
	}
}

// TestOpenServerStreamGivesItsTurnBack: a server stream that stays open
// (it waits for events to send) gives its turn back after twice its
// flow's queue target, and its end later changes nothing. After streamLongAt of them, the flow's streams take no
// turn, and their lifetimes are not learned.
func TestOpenServerStreamGivesItsTurnBack(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(5*time.Millisecond))
	g := NewGuard("run", l)
	f := l.Flow("/s/Watch")
	type open struct {
		c admission.Call
		p admission.Permit
	}
	var streams []open
	for i := range streamLongAt {
		c, p, d := startStream(t, g, "/s/Watch", false)
		if d.Refused {
			t.Fatalf("stream %d: Start refused: %+v", i, d)
		}
		if _, ok := p.Ref.(*streamTurn); !ok {
			t.Fatalf("stream %d: permit %+v holds no turn, want one", i, p)
		}
		if r := l.Running(); r != 1 {
			t.Errorf("stream %d: Running() = %d with the stream started, want 1", i, r)
		}
		waitUntil(t, func() bool { return l.Running() == 0 && f.streamScore.Load() == int32(i+1) }, "the turn given back at the end of the hold")
		streams = append(streams, open{c, p})
	}
	if r := l.Running(); r != 0 {
		t.Errorf("Running() = %d with %d streams open past their hold, want 0", r, len(streams))
	}
	for _, s := range streams {
		g.Finish(s.c, s.p, admission.Outcome{})
	}
	if r := l.Running(); r != 0 {
		t.Errorf("Running() = %d after the open streams ended, want 0 (no turn given back twice)", r)
	}
	if st := f.ServiceTime(); st != 0 {
		t.Errorf("Flow.ServiceTime() = %v after streams open past their hold, want 0 (not learned)", st)
	}
	// The flow's streams stay open: the next takes no turn.
	c, p, d := startStream(t, g, "/s/Watch", false)
	if d.Refused {
		t.Fatalf("Start refused: %+v", d)
	}
	if r := l.Running(); r != 0 {
		t.Errorf("Running() = %d with a stream of a flow whose streams stay open, want 0", r)
	}
	// It ends at once: streams of the flow may be short again.
	g.Finish(c, p, admission.Outcome{})
	if s := f.streamScore.Load(); s != streamLongAt-1 {
		t.Errorf("streamScore = %d after a short stream without a turn, want %d", s, streamLongAt-1)
	}
}

// TestClientStreamTakesNoTurn: a stream the client sends on takes no
// turn: its handler waits for the client.
func TestClientStreamTakesNoTurn(t *testing.T) {
	l := mustNew(t, WithBounds(1, 1))
	g := NewGuard("run", l)
	c, p, d := startStream(t, g, "/s/Chat", true)
	if d.Refused {
		t.Fatalf("Start refused: %+v", d)
	}
	if r := l.Running(); r != 0 {
		t.Errorf("Running() = %d with a bidi stream open, want 0", r)
	}
	g.Finish(c, p, admission.Outcome{})
	if r := l.Running(); r != 0 {
		t.Errorf("Running() = %d after it ended, want 0", r)
	}
	if s := l.Flow("/s/Chat").streamScore.Load(); s != 0 {
		t.Errorf("streamScore = %d, want 0", s)
	}
}

// TestStreamWaitRunsOutWithoutATurn: a server stream whose wait for a
// turn runs out without evidence of overload runs without one, not
// beyond the limit (an overrun is evidence of overload, and streams
// that stay open would make it); with evidence it is refused.
func TestStreamWaitRunsOutWithoutATurn(t *testing.T) {
	cpu := &fakeCPU{}
	l := mustNew(t, WithBounds(1, 1), WithQueueTarget(time.Millisecond), WithCPU(cpu))
	g := NewGuard("run", l)
	hold, _ := l.Flow("/s/M").TryAcquire(time.Now())
	c, p, d := startStream(t, g, "/s/Feed", false)
	if d.Refused {
		t.Fatalf("Start with the turn held and no overload refused: %+v", d)
	}
	if _, ok := p.Ref.(*Lane); !ok || p.Value&unturned == 0 {
		t.Errorf("permit = %+v, want one of a stream without a turn", p)
	}
	if s := l.Stats(); s.Overruns != 0 || l.Running() != 1 {
		t.Errorf("Stats().Overruns = %d, Running() = %d, want 0 and 1 (the held turn)", s.Overruns, l.Running())
	}
	g.Finish(c, p, admission.Outcome{})
	cpu.saturated = true
	_, _, d = startStream(t, g, "/s/Feed", false)
	if !d.Refused || d.Reason != ReasonTimeout {
		t.Errorf("Start with the turn held and the CPU saturated = %+v, want refused %q", d, ReasonTimeout)
	}
	hold.Release()
	if r, w := l.Running(), l.Waiting(); r != 0 || w != 0 {
		t.Errorf("Running(), Waiting() = %d, %d at the end, want 0, 0", r, w)
	}
}
