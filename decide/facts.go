package decide

import (
	"context"
	"crypto/x509"
	"net"
	"strconv"
	"time"
)

// Facts are what a transport knows of one call, as a front-end gives
// them to the engine: built per call, by value, without allocating. The
// engine computes the call's key, tenant and criticality class from them
// and the rule that governs the call; a front-end never supplies those.
//
// The zero Facts are a unary call of no method, without a deadline,
// headers, peer or identity. Facts have no synchronisation of their own:
// they belong to the goroutine that builds them, on which the engine
// reads them. Lookup's methods, though, must be safe for concurrent use.
type Facts struct {
	// Ctx is the call's context, given to Lookup and carried to the
	// guards (admission.Call.Ctx). nil reads as context.Background().
	Ctx context.Context
	// Method is the call's full method name ("/pkg.Service/Method"), or
	// its route in the same form for a transport of routes.
	Method string
	// Deadline is the call's deadline; the zero Time: none.
	Deadline time.Time
	// Kind is the call's stream kind, as far as the front-end knows it
	// when it asks: a transport that admits calls before it can tell
	// (gRPC's tap) says UnknownKind for a method none of whose calls has
	// reached a handler yet, and the kind it saw after that.
	Kind Kind
	// Lookup reads the call's headers, peer and verified identity when a
	// rule asks for them; nil: the call has none of them.
	Lookup Lookup
}

// Lookup reads the facts of a call that cost a lookup to find — a header,
// the peer's address, the verified client certificate — so that the
// engine reads only those a rule asks for. A front-end implements it over
// its protocol's request without copying (a map type over grpc-go's
// metadata.MD or net/http's Header is stored in an interface without
// allocating, as is a struct of no fields that reads ctx). Its methods
// get Facts.Ctx, must not allocate when the answer is at hand, and must
// be safe for concurrent use.
type Lookup interface {
	// Header returns the first value of the call's header name, and
	// whether the call has it. name is lower-case ASCII ("x-tenant-id");
	// a front-end whose headers are stored otherwise (net/http's
	// canonical "X-Tenant-Id") maps it. A front-end whose protocol marks
	// a retry attempt otherwise than PreviousAttemptsHeader answers that
	// name with the count of previous attempts.
	Header(ctx context.Context, name string) (string, bool)
	// Peer returns the address of the call's client, or nil when it is
	// unknown. Give every call of one connection the same value: PeerKey
	// formats a *net.TCPAddr once per value.
	Peer(ctx context.Context) net.Addr
	// VerifiedLeaf returns the client certificate that the server's TLS
	// configuration verified (the first certificate of the first verified
	// chain), or nil when the client presented none or it was not
	// verified.
	VerifiedLeaf(ctx context.Context) *x509.Certificate
}

// Kind is the stream kind of a call. The zero Kind is Unary.
type Kind uint8

// The stream kinds.
const (
	// Unary: one request, one response.
	Unary Kind = iota
	// ServerStream: one request, a stream of responses.
	ServerStream
	// ClientStream: a stream of requests, one response.
	ClientStream
	// BidiStream: streams both ways.
	BidiStream
	// UnknownKind: the front-end cannot tell yet whether the call is a
	// stream (admission.Call.StreamUnknown): Stream is false until its
	// handler starts, when the front-end gives the kind.
	UnknownKind
)

// String returns "unary", "server_stream", "client_stream",
// "bidi_stream" or "unknown".
func (k Kind) String() string {
	switch k {
	case UnknownKind:
		return "unknown"
	case ServerStream:
		return "server_stream"
	case ClientStream:
		return "client_stream"
	case BidiStream:
		return "bidi_stream"
	}
	return "unary"
}

// Stream reports whether k is a stream of any kind (admission.Call.Stream);
// false for Unary and UnknownKind.
func (k Kind) Stream() bool { return k == ServerStream || k == ClientStream || k == BidiStream }

// ClientSends reports whether the client sends a stream of messages on
// a call of kind k: ClientStream and BidiStream
// (admission.Call.ClientStream).
func (k Kind) ClientSends() bool { return k == ClientStream || k == BidiStream }

// PreviousAttemptsHeader is the header by which gRPC clients (grpc-go,
// grpcio) mark a retry attempt, with the number of attempts before it.
const PreviousAttemptsHeader = "grpc-previous-rpc-attempts"

func (f Facts) ctx() context.Context {
	if f.Ctx == nil {
		return context.Background()
	}
	return f.Ctx
}

// Header returns the first value of the call's header name (lower-case
// ASCII), and whether it has one. It allocates nothing when the Lookup
// does not.
func (f Facts) Header(name string) (string, bool) {
	if f.Lookup == nil {
		return "", false
	}
	return f.Lookup.Header(f.ctx(), name)
}

// Peer returns the address of the call's client, or nil when unknown.
func (f Facts) Peer() net.Addr {
	if f.Lookup == nil {
		return nil
	}
	return f.Lookup.Peer(f.ctx())
}

// VerifiedLeaf returns the call's verified client certificate, or nil.
func (f Facts) VerifiedLeaf() *x509.Certificate {
	if f.Lookup == nil {
		return nil
	}
	return f.Lookup.VerifiedLeaf(f.ctx())
}

// PreviousAttempts returns how many attempts of the call came before
// this one, from PreviousAttemptsHeader: 0 for a first attempt (no
// header), the header's value when it is a positive integer, and 1 for a
// header whose value is anything else (it still marks a retry).
func (f Facts) PreviousAttempts() int {
	v, ok := f.Header(PreviousAttemptsHeader)
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// Snapshot is a Lookup over fixed values: for tests, tools, and
// front-ends that have a call's facts at hand as plain values. The
// zero Snapshot has no header, peer or identity. It must not change while
// a call reads it; it is then safe for concurrent use.
type Snapshot struct {
	// Headers maps lower-case header names to their first value.
	Headers map[string]string
	// Addr is the client's address; nil: unknown.
	Addr net.Addr
	// Leaf is the verified client certificate; nil: none.
	Leaf *x509.Certificate
}

// Header returns s.Headers[name].
func (s *Snapshot) Header(_ context.Context, name string) (string, bool) {
	v, ok := s.Headers[name]
	return v, ok
}

// Peer returns s.Addr.
func (s *Snapshot) Peer(context.Context) net.Addr { return s.Addr }

// VerifiedLeaf returns s.Leaf.
func (s *Snapshot) VerifiedLeaf(context.Context) *x509.Certificate { return s.Leaf }
