package protect

import (
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/connlimit"
	"github.com/levee-go/levee/goaway"
	"github.com/levee-go/levee/runlimit"
)

// HandshakeTimeout is how long a connection has to complete its HTTP/2
// handshake once WithConnLimits is given (grpc.ConnectionTimeout, in
// ServerOptions; grpc-go's own default is 120 s): under a cap, a
// connection that never completes it holds a place meanwhile.
const HandshakeTimeout = 10 * time.Second

// WithConnLimits caps the connections open at once on the listener that
// Server.Listener wraps: max in all (0: the default, DefaultMaxConns) and
// perPeer from one client, by IP address, an IPv6 client by its /64 (0,
// the default: no cap). A connection beyond a cap is reset as soon as it
// is accepted: a grpc-go client reports the address unavailable, backs
// off and uses its other addresses (see connlimit). With it,
// ServerOptions also gives connections HandshakeTimeout to complete their
// handshake. New fails on a negative number.
//
// Many clients behind one address (a NAT, an L7 proxy, a node's SNAT)
// share perPeer: set it above what they open together, or leave it off.
func WithConnLimits(max, perPeer int) Option {
	return func(o *options) { o.connMax, o.connPeer, o.connsSet = max, perPeer, true }
}

// fdReserve is the share of the process's file descriptors that
// DefaultMaxConns leaves to the server's own files and connections.
const fdReserve = 0.1

// DefaultMaxConns is the cap on open connections that Server.Listener
// applies when WithConnLimits gives none: the process's limit on open file
// descriptors (RLIMIT_NOFILE, which Go raises to its hard limit at start)
// less a tenth, at least 64, left for the server's own files, database
// connections and outgoing calls; 0 (no cap) where the limit is unlimited
// or cannot be read. It never refuses a connection a server without it
// could have served: beyond it the process runs out of descriptors, its
// accept loop fails and retries, and its own files and outgoing calls fail
// with it.
func DefaultMaxConns() int { return maxConnsFor(fdLimit()) }

// maxConnsFor is DefaultMaxConns for a limit of n descriptors (ok false:
// unlimited or unknown).
func maxConnsFor(n uint64, ok bool) int {
	if !ok || n == 0 {
		return 0
	}
	reserve := max(64, uint64(float64(n)*fdReserve))
	if n <= reserve {
		return 1
	}
	return int(min(n-reserve, uint64(1<<31-1)))
}

// Listener wraps inner in the server's connection caps (WithConnLimits;
// by default DefaultMaxConns in all, nothing per client): a connection
// beyond them is reset at once, at the cost of an accept and a close,
// while the connections the server has keep being served. Serve the
// grpc.Server (or Server.GoAway's server) on what it returns; its Stats
// count the connections open and refused. Closing it closes inner.
//
// A cap on connections is not evidence of overload: its default is where
// the process would run out of file descriptors anyway, and a cap you
// give is a bound you chose. A connection refused is not a call refused:
// the client reconnects elsewhere or later.
func (p *Server) Listener(inner net.Listener) *connlimit.Listener {
	max := p.connMax
	if max == 0 {
		max = DefaultMaxConns()
	}
	// Cannot fail: New checked the numbers.
	l, _ := connlimit.NewListener(inner, connlimit.WithMaxConns(max), connlimit.WithMaxConnsPerPeer(p.connPeer))
	return l
}

// GoAway returns a goaway.Server that serves one listener through the
// grpc.Servers build makes and, while the preset has evidence of overload
// (RunLimit().Overloaded: the CPU saturated, calls waiting for a turn
// without a pause, a spike) at every check of a sustained period, sends a
// graceful HTTP/2 GOAWAY to a share of its connections, one share per
// round (by default after 10 s of overload, an eighth of the connections
// every 10 s, jittered: see goaway's defaults, which opts change). No call
// in flight fails: a client finishes its calls on the old connection and
// makes a new one, which an L4 load balancer may send to a less loaded
// replica. It is Envoy's overload action that disables keepalive.
//
// build must return a new grpc.Server installing this protection
// (p.ServerOptions()) with the same services every time; it is called once
// per shard now and once per round. Stop the goaway.Server (GracefulStop
// or Stop) before p. It is an error when a goaway option is bad or build
// returns nil.
//
// A single replica gains nothing by it: its clients come back to it. Use
// it behind a load balancer that spreads new connections over replicas.
func (p *Server) GoAway(build func() *grpc.Server, opts ...goaway.Option) (*goaway.Server, error) {
	return goaway.NewServer(build, evidence{p.run}, opts...)
}

// evidence is the preset's evidence of overload as goaway reads it.
type evidence struct{ run *runlimit.Limiter }

func (e evidence) Saturated() bool { return e.run.Overloaded(time.Now()) }
