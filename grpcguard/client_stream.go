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
	stop          func() bool
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

// abandon finishes a stream whose context ended before the caller saw its
// end.
func (s *guardedClientStream) abandon() {
	s.end(status.FromContextError(s.call.Ctx.Err()).Err(), false)
}

// end finishes the stream's call once; withTrailer says the trailer may
// be read (RecvMsg returned an error).
func (s *guardedClientStream) end(err error, withTrailer bool) {
	if !s.done.CompareAndSwap(false, true) {
		return
	}
	s.stop()
	var md *metadata.MD
	if withTrailer {
		tr := s.ClientStream.Trailer()
		md = &tr
	}
	s.c.finish(s.e, &s.call, &s.permits, err, md)
}
