package grpcguard

import (
	"io"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/admission"
)

// guardedClientStream finishes its call when the stream ends.
type guardedClientStream struct {
	grpc.ClientStream
	c             *Client
	e             *clientEntry
	call          admission.Call
	permits       admission.Permits
	serverStreams bool
	done          atomic.Bool
	// stop unregisters abandon from the stream's context. It is set after
	// context.AfterFunc returns, which may be after abandon has started
	// (a context that ended while the stream opened), so abandon never
	// reads it; only the stream's methods, called once the interceptor has
	// returned the stream, do.
	stop func() bool
}

func (s *guardedClientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	switch {
	case err == nil:
		if !s.serverStreams {
			s.end(nil, false) // the one response of a client-streaming call
		}
	case err == io.EOF:
		s.end(nil, false)
	default:
		s.end(err, true)
	}
	return err
}

func (s *guardedClientStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && err != io.EOF { // io.EOF: the status comes from RecvMsg
		s.end(err, false)
	}
	return err
}

func (s *guardedClientStream) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	if err != nil && err != io.EOF {
		s.end(err, false)
	}
	return md, err
}

// abandon, run by context.AfterFunc, finishes a stream whose context
// ended before the caller saw its end. It reads only what streamCall set
// before registering it, and needs no stop: it is the callback stop
// would cancel.
func (s *guardedClientStream) abandon() {
	if s.done.CompareAndSwap(false, true) {
		s.finish(status.FromContextError(s.call.Ctx.Err()).Err(), false)
	}
}

// end finishes the stream's call once, from one of the stream's methods;
// withTrailer says the trailer may be read (RecvMsg returned an error).
func (s *guardedClientStream) end(err error, withTrailer bool) {
	if !s.done.CompareAndSwap(false, true) {
		return
	}
	s.stop()
	s.finish(err, withTrailer)
}

// finish reports the stream's end to every guard that admitted it.
func (s *guardedClientStream) finish(err error, withTrailer bool) {
	var md *metadata.MD
	if withTrailer {
		tr := s.ClientStream.Trailer()
		md = &tr
	}
	s.c.finish(s.e, &s.call, &s.permits, err, md)
}
