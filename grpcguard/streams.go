package grpcguard

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/methodkind"
	"github.com/levee-go/levee/internal/peeraddr"
)

// Streams are admitted once, when they open: the rule's guards decide on
// them as on a unary call, with admission.Call.Stream set (in the tap once
// a call of their method reached its handler: see
// admission.Call.StreamUnknown).
// An open stream holds a turn of a run limit for its first moments at
// most (runlimit's package doc, "Streams"), and its lifetime is never
// reported as a duration (admission.Outcome.Duration is 0), so that no
// guard learns it as a service time. What a stream's messages cost the
// server shows in the CPU signal, which the run limit follows.
//
// Open streams have a cap of their own instead (WithStreamLimits), a
// defence against a client that opens streams without end: beyond it a
// new stream is refused with ReasonTooManyStreams.

// ReasonTooManyStreams is the refusal of a stream beyond the open-stream
// caps (WithStreamLimits).
const ReasonTooManyStreams = "too many open streams"

// StreamGuardName names the open-stream cap in refusal messages.
const StreamGuardName = "streams"

// Defaults of WithStreamLimits.
const (
	// DefaultMaxStreams caps the streams open at once on a Server.
	DefaultMaxStreams = 10000
	// DefaultMaxStreamsPerPeer caps the streams one client (by IP
	// address) holds open at once.
	DefaultMaxStreamsPerPeer = 2500
)

// streamRetryAfter is the retry delay of a stream refused by the caps: a
// stream ends at its client's pace, not the server's.
const streamRetryAfter = time.Second

// WithStreamLimits caps the streams open at once: max on the Server and
// perPeer for one client, by IP address, an IPv6 client by its /64 (0: no
// cap). A client without an IP address (on a Unix socket) has no cap of
// its own; its streams count toward max. Default
// DefaultMaxStreams and DefaultMaxStreamsPerPeer. Streams of exempt
// methods count too, except the standard health service's
// (grpc.health.v1.Health), which are neither counted nor capped: a
// client's health checking holds one Watch open on each connection, and
// grpc-go's client takes a refused Watch for an unhealthy server and
// sends it no call. New fails on a negative number.
//
// A stream beyond a cap is refused with the code of its method's rule,
// or WithStreamCode's when no rule guards the method.
func WithStreamLimits(max, perPeer int) Option {
	return func(o *serverOptions) { o.maxStreams, o.maxPeerStreams, o.streamsSet = max, perPeer, true }
}

// WithStreamCode sets the code of a stream refused by the caps
// (WithStreamLimits) on a method no rule guards: an exempt method, or a
// name served by a handler for unknown services. A guarded method's
// stream is refused with its rule's code. Default
// decide.ResourceExhausted, which a zero code also means; New fails on a
// code other than decide.ResourceExhausted or decide.Unavailable.
func WithStreamCode(c decide.Code) Option {
	return func(o *serverOptions) { o.streamCode = c }
}

// StreamStats are the open-stream counts of a Server, a plain value that
// Server.StreamStats copies out: it has no lock of its own and may be read
// from several goroutines. The zero value counts no stream.
type StreamStats struct {
	Open    int64  // streams open now
	Peers   int    // clients with a stream open, by IP address
	Refused uint64 // streams refused by the caps
}

// streams knows each method's stream kind and counts the open streams.
// Only registered methods reach the interceptors, unless the server has a
// handler for unknown services (grpc.UnknownServiceHandler), which the
// stream interceptor runs for every name a client sends; those names are
// not noted (the interceptor's srv is nil). The tap admits a call of a
// method not noted as of unknown kind, and the interceptor tells its kind
// by the time its handler starts.
type streams struct {
	kinds methodkind.Set

	max, perPeer int64
	open         atomic.Int64
	refused      atomic.Uint64
	mu           sync.Mutex
	peers        map[netip.Addr]int64 // open streams by client (peeraddr.Client)
}

func newStreams(max, perPeer int) *streams {
	return &streams{max: int64(max), perPeer: int64(perPeer), peers: map[netip.Addr]int64{}}
}

// enter counts a stream that opens, or refuses it beyond a cap. leave
// must follow an admitted enter, with the client it returned: the zero
// Addr when the stream counts toward no cap per client.
func (s *streams) enter(ctx context.Context) (netip.Addr, bool) {
	if s.max <= 0 && s.perPeer <= 0 {
		s.open.Add(1)
		return netip.Addr{}, true
	}
	if n := s.open.Add(1); s.max > 0 && n > s.max {
		s.open.Add(-1)
		s.refused.Add(1)
		return netip.Addr{}, false
	}
	if s.perPeer <= 0 {
		return netip.Addr{}, true
	}
	ip := peeraddr.Client(peerAddr(ctx))
	if !ip.IsValid() {
		return ip, true // no IP address (a Unix socket): no cap per client
	}
	s.mu.Lock()
	n := s.peers[ip]
	if n >= s.perPeer {
		s.mu.Unlock()
		s.open.Add(-1)
		s.refused.Add(1)
		return netip.Addr{}, false
	}
	s.peers[ip] = n + 1
	s.mu.Unlock()
	return ip, true
}

func (s *streams) leave(ip netip.Addr) {
	s.open.Add(-1)
	if s.perPeer <= 0 || !ip.IsValid() {
		return
	}
	s.mu.Lock()
	if n := s.peers[ip] - 1; n > 0 {
		s.peers[ip] = n
	} else {
		delete(s.peers, ip)
	}
	s.mu.Unlock()
}

func (s *streams) stats() StreamStats {
	s.mu.Lock()
	peers := len(s.peers)
	s.mu.Unlock()
	return StreamStats{Open: s.open.Load(), Peers: peers, Refused: s.refused.Load()}
}

// streamRefusal is the decision that refuses a stream beyond the caps.
var streamRefusal = admission.RefuseFor(admission.CauseTooManyStreams, admission.EvidenceLimit, ReasonTooManyStreams, streamRetryAfter)

func validStreamLimits(o serverOptions) error {
	var errs []error
	if o.maxStreams < 0 || o.maxPeerStreams < 0 {
		errs = append(errs, fmt.Errorf("grpcguard: WithStreamLimits: want caps >= 0, got max %d, perPeer %d", o.maxStreams, o.maxPeerStreams))
	}
	if c := o.streamCode; c != decide.OK && c != decide.ResourceExhausted && c != decide.Unavailable {
		errs = append(errs, fmt.Errorf("grpcguard: WithStreamCode: want RESOURCE_EXHAUSTED or UNAVAILABLE, got %v", c))
	}
	return errors.Join(errs...)
}

// healthServicePrefix is the standard health service's methods
// (grpc.health.v1.Health), whose streams the caps leave alone.
const healthServicePrefix = "/grpc.health.v1.Health/"

// isHealthStream reports whether method is the standard health
// service's: its Watch streams are neither counted nor capped.
func isHealthStream(method string) bool { return strings.HasPrefix(method, healthServicePrefix) }
