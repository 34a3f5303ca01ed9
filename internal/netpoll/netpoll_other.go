//go:build !linux

package netpoll

import "time"

// Waiter would park a goroutine in Go's network poller; only Linux has
// one here (see netpoll_linux.go). The zero value is ready to use and
// safe for concurrent use.
type Waiter struct{}

// Wait reports that it did not wait.
func (*Waiter) Wait(time.Duration) bool { return false }
