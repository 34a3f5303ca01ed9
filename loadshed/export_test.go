package loadshed

// What the package's external tests reach of its internals.

// OnCloseWait sets the hook that runs when a Close of c is about to wait
// for the follower goroutine; set it before Follow.
func OnCloseWait(c *Controller, f func()) { c.onWait = f }

// FollowerDone returns the channel closed when c's follower goroutine
// has exited; nil before Follow.
func FollowerDone(c *Controller) <-chan struct{} {
	c.followMu.Lock()
	defer c.followMu.Unlock()
	return c.done
}
