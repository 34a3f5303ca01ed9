//go:build linux

package runlimit

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// netWaiter parks a goroutine in Go's network poller, through a timerfd
// (see Limiter.release). The runtime wakes a goroutine parked there only
// from a poll of the network, which on a processor with work comes after
// every goroutine that was runnable has run; that poll also wakes the
// goroutines whose sockets became readable meanwhile.
//
// The zero value is ready to use; the timerfd is made on first need and
// closed with its os.File when the netWaiter is garbage collected.
type netWaiter struct {
	busy atomic.Bool
	once sync.Once
	f    *os.File // nil if the timerfd could not be made
	fd   int
}

func (n *netWaiter) init() {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return
	}
	// A non-blocking descriptor: os.NewFile registers it with the poller.
	n.fd = fd
	n.f = os.NewFile(uintptr(fd), "runlimit-netpoll")
}

// wait parks the caller in the network poller until a poll at least d
// from now, and reports whether it did: it does not while another
// goroutine waits, or if the timerfd cannot be made or armed.
func (n *netWaiter) wait(d time.Duration) bool {
	if !n.busy.CompareAndSwap(false, true) {
		return false
	}
	defer n.busy.Store(false)
	n.once.Do(n.init)
	if n.f == nil {
		return false
	}
	// No interval, first expiry d from now.
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(n.fd, 0, &spec, nil); err != nil {
		return false
	}
	var buf [8]byte // the count of expiries
	_, err := n.f.Read(buf[:])
	return err == nil
}
