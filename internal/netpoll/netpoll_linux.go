//go:build linux

// Package netpoll parks a goroutine in Go's network poller. The runtime
// wakes a goroutine parked there only from a poll of the network, which
// on a processor with work comes after every goroutine that was runnable
// has run; that poll also wakes the goroutines whose sockets became
// readable meanwhile. runlimit waits so before it hands a turn to a lower
// class (docs/runlimit.md, "release: the wait for the network poller").
package netpoll

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Waiter parks a goroutine in Go's network poller, through a timerfd.
// The zero value is ready to use; the timerfd is made on first need and
// closed with its os.File when the Waiter is garbage collected. One
// goroutine waits at a time: Wait is safe for concurrent use, and a
// concurrent call returns false at once.
type Waiter struct {
	busy atomic.Bool
	once sync.Once
	f    *os.File // nil if the timerfd could not be made
	fd   int
	rc   syscall.RawConn
	read func(fd uintptr) bool // reads the expiries into buf; made once
	// Set by read, used by the one goroutine that holds busy.
	parked bool // the read found no expiry and so waited in the poller
	failed bool // the read failed otherwise
	buf    [8]byte
}

// waitTries bounds how many times Wait arms the timer: a timer that
// expired before its read was looked at (the thread was descheduled
// between the two system calls) is read without a poll of the network.
const waitTries = 3

func (n *Waiter) init() {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return
	}
	// A non-blocking descriptor: os.NewFile registers it with the poller.
	f := os.NewFile(uintptr(fd), "levee-netpoll")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return
	}
	n.fd, n.f, n.rc = fd, f, rc
	n.read = func(fd uintptr) bool {
		_, err := unix.Read(int(fd), n.buf[:])
		switch err {
		case nil:
			return true
		case unix.EAGAIN:
			n.parked = true // RawRead now waits in the poller
			return false
		case unix.EINTR:
			return false
		default:
			n.failed = true
			return true
		}
	}
}

// Wait parks the caller in the network poller until a poll at least d
// from now, and reports whether it did: it does not while another
// goroutine waits, or if the timerfd cannot be made, armed or read. A d
// of 0 or less waits for the next poll (the timer is armed 1ns ahead: a
// zero expiry would disarm it, and the wait would never end). It
// allocates nothing.
func (n *Waiter) Wait(d time.Duration) bool {
	if !n.busy.CompareAndSwap(false, true) {
		return false
	}
	defer n.busy.Store(false)
	n.once.Do(n.init)
	if n.f == nil {
		return false
	}
	// No interval, first expiry d from now, and never 0: that disarms.
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(max(int64(d), 1))}
	for range waitTries {
		if err := unix.TimerfdSettime(n.fd, 0, &spec, nil); err != nil {
			return false
		}
		n.parked, n.failed = false, false
		if err := n.rc.Read(n.read); err != nil || n.failed {
			return false
		}
		if n.parked {
			return true
		}
	}
	return false
}
