//go:build linux && !race

// Like yield_test.go, this test is about the scheduler's order, which the
// race detector randomises: `make test` runs it in a second pass without
// -race.

package runlimit

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// TestTurnWaitsForUnreadRequest: on one processor, a critical request that
// reached the server's socket while a handler held the only turn is read,
// and its call queued, before the turn is handed on, so the turn goes to it
// rather than to the sheddable call that was already waiting. Without the
// wait for the network poller the sheddable call runs first: the request's
// reader is woken only when the processor runs out of goroutines.
func TestTurnWaitsForUnreadRequest(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	l, err := New(WithBounds(1, 1), WithQueueTarget(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f := l.Flow("m")
	critical := f.Lane("", admission.Critical)
	sheddable := f.Lane("", admission.Sheddable)
	// A critical call ended in this interval: the class is present.
	tk, err := critical.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tk.Done(time.Now(), false)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	held, err := critical.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	run := func(name string, ln *Lane) {
		tk, err := ln.Acquire(context.Background())
		if err != nil {
			t.Error(name, err)
			return
		}
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
		tk.Done(time.Now(), false)
	}
	wg.Add(2)
	go func() { defer wg.Done(); run("sheddable", sheddable) }()
	go func() { // the transport's reader of the critical request
		defer wg.Done()
		var b [1]byte
		if _, err := server.Read(b[:]); err != nil {
			t.Error(err)
			return
		}
		run("critical", critical)
	}()
	for l.Waiting() == 0 {
		runtime.Gosched()
	}
	// Let the reader park in the poller: the processor idles and polls.
	time.Sleep(10 * time.Millisecond)
	if _, err := client.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	held.Done(time.Now(), false) // the handler ends; the request is unread
	wg.Wait()
	if len(order) != 2 || order[0] != "critical" {
		t.Fatalf("order %v, want the critical call first", order)
	}
}
