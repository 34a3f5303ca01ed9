//go:build linux && !race

// Like yield_test.go, this test is about the scheduler's order, which the
// race detector randomises: `make test` runs it in a second pass without
// -race.

package runlimit

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/levee-go/levee/admission"
)

// TestTurnWaitsForUnreadRequest: on one processor, a critical request that
// reached the server's socket while a handler held the only turn is read,
// and its call queued, before the turn is handed on, so the turn goes to it
// rather than to the sheddable call that was already waiting. Without the
// wait for the network poller the sheddable call runs first: the request's
// reader is woken only when the processor runs out of goroutines.
//
// The order depends on the kernel's delivery and the threads' scheduling
// as well: with the wait, 1-4% of single tries put the sheddable call
// first (3 of 300 at dd8a0b1); without it, 19 of 20 did. So the test
// tries up to five times, 50ms apart, and wants the critical call first
// twice. Tries that shared one switch to one processor failed together
// (4 or 5 of 5, in 1% of the tests), so each try makes its own: 0
// failures in 800 runs of the test, and 30 of 30 without the wait.
func TestTurnWaitsForUnreadRequest(t *testing.T) {
	var orders [][]string
	first := 0
	for range 5 {
		order := turnOrder(t)
		orders = append(orders, order)
		if len(order) == 2 && order[0] == "critical" {
			first++
		}
		if first == 2 {
			return
		}
		// Chance orders come in runs (another process on the CPU, say):
		// let one pass.
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("orders %v, want the critical call first in two of five tries", orders)
}

// turnOrder runs TestTurnWaitsForUnreadRequest's calls once, on one
// processor, and returns the order in which they got the turn.
func turnOrder(t *testing.T) []string {
	t.Helper()
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
		read  atomic.Bool // the reader has read the request
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
		read.Store(true)
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
	// Loopback delivers the byte a moment after the write returns, on
	// the kernel's time: the request has reached the server's socket
	// once the socket reads as readable, or once the reader has read it
	// (while this goroutine waits in poll(2), the runtime may hand the
	// processor to the reader).
	delivered := waitDelivered(server, &read)
	if delivered != nil {
		server.Close() // the reader's Read ends
	}
	held.Done(time.Now(), false) // the handler ends; the request is unread
	wg.Wait()
	if delivered != nil {
		t.Fatal(delivered)
	}
	return order
}

// waitDelivered waits, for at most a second, until c has bytes to read
// or read reports that they were read, without reading them and without
// parking the caller in Go's network poller. It returns an error, rather
// than failing the test, so that the caller can let its goroutines end
// first.
func waitDelivered(c net.Conn, read *atomic.Bool) error {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Second)
	for !read.Load() && time.Now().Before(deadline) {
		var n int
		if cerr := rc.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			// A short wait: a reader that takes the byte while this
			// thread sleeps in poll(2) leaves the socket unreadable.
			n, err = unix.Poll(fds, 5)
		}); cerr != nil {
			return cerr
		}
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("poll of the server socket: %w", err)
		}
		if n == 1 {
			return nil
		}
	}
	if read.Load() {
		return nil
	}
	return fmt.Errorf("the request reached the server socket neither readable nor read a second after the write")
}
