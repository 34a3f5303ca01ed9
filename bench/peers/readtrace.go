package main

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// readTrace records when a traced server's connections read bytes, so
// that the trace can tell arrivals that come in clumps, with quiet gaps
// between them, from arrivals spread evenly: a server idle while calls
// are refused has either.
type readTrace struct {
	mu     sync.Mutex
	last   time.Time
	reads  int
	maxGap time.Duration
	quiet  time.Duration // the sum of the gaps longer than quietGap
}

// quietGap is the shortest gap between reads that counts as quiet: a few
// of the loaded calls' service times.
const quietGap = 2 * time.Millisecond

func (t *readTrace) note(now time.Time) {
	t.mu.Lock()
	if !t.last.IsZero() {
		gap := now.Sub(t.last)
		t.maxGap = max(t.maxGap, gap)
		if gap > quietGap {
			t.quiet += gap
		}
	}
	t.last = now
	t.reads++
	t.mu.Unlock()
}

// take returns what was recorded since the last take, as a trace field,
// and starts anew.
func (t *readTrace) take() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := fmt.Sprintf(" reads %d maxgap %v quiet %v", t.reads, t.maxGap.Round(100*time.Microsecond), t.quiet.Round(time.Millisecond))
	t.reads, t.maxGap, t.quiet = 0, 0, 0
	return s
}

type tracedListener struct {
	net.Listener
	t *readTrace
}

func (l tracedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tracedConn{Conn: c, t: l.t}, nil
}

type tracedConn struct {
	net.Conn
	t *readTrace
}

func (c tracedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.t.note(time.Now())
	}
	return n, err
}

// reads is the read trace of this process's server (traced only with
// traceEnv, and only levee's preset prints it).
var reads readTrace
