//go:build !linux

package runlimit

import "time"

// netWaiter would park a goroutine in Go's network poller; only Linux has
// one here (see netpoll_linux.go), so a turn is handed on without the poll.
type netWaiter struct{}

// wait reports that it did not wait.
func (*netWaiter) wait(time.Duration) bool { return false }
