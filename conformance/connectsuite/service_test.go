package connectsuite

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	v1 "github.com/levee-go/levee/conformance/connectsuite/internal/conformancev1"
	"github.com/levee-go/levee/conformance/connectsuite/internal/conformancev1/conformancev1connect"
)

// service is the ConformanceService as the suite's docs describe it
// (docs/testing_servers.md in connectrpc/conformance): every method
// answers what its request's response definition asks (headers,
// trailers, data, an error, a delay) and echoes what it received (the
// request headers, the timeout, the requests, a Connect GET's query).
// Unimplemented is left unimplemented, as the suite expects.
type service struct {
	conformancev1connect.UnimplementedConformanceServiceHandler
}

func (service) Unary(ctx context.Context, req *connect.Request[v1.UnaryRequest]) (*connect.Response[v1.UnaryResponse], error) {
	payload, err := unary(ctx, req.Header(), req.Msg.GetResponseDefinition(), req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&v1.UnaryResponse{Payload: payload}), nil
}

func (service) IdempotentUnary(ctx context.Context, req *connect.Request[v1.IdempotentUnaryRequest]) (*connect.Response[v1.IdempotentUnaryResponse], error) {
	payload, err := unary(ctx, req.Header(), req.Msg.GetResponseDefinition(), req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&v1.IdempotentUnaryResponse{Payload: payload}), nil
}

func (service) ClientStream(ctx context.Context, stream *connect.ClientStream[v1.ClientStreamRequest]) (*connect.Response[v1.ClientStreamResponse], error) {
	var def *v1.UnaryResponseDefinition
	var first = true
	var reqs []proto.Message
	for stream.Receive() {
		msg := stream.Msg()
		if first {
			def, first = msg.GetResponseDefinition(), false // the first message's only
		}
		reqs = append(reqs, msg)
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	payload, err := unary(ctx, stream.RequestHeader(), def, reqs...)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&v1.ClientStreamResponse{Payload: payload}), nil
}

func (service) ServerStream(ctx context.Context, req *connect.Request[v1.ServerStreamRequest], stream *connect.ServerStream[v1.ServerStreamResponse]) error {
	def := req.Msg.GetResponseDefinition()
	if def == nil {
		return nil
	}
	addHeaders(stream.ResponseHeader(), def.GetResponseHeaders())
	addHeaders(stream.ResponseTrailer(), def.GetResponseTrailers())
	data := def.GetResponseData()
	if len(data) > 0 {
		// The headers go at once, so that a client can read them before
		// the first (delayed) message.
		if err := stream.Send(nil); err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
	}
	delay := time.Duration(def.GetResponseDelayMs()) * time.Millisecond
	for i, d := range data {
		res := &v1.ServerStreamResponse{Payload: &v1.ConformancePayload{Data: d}}
		if i == 0 { // nothing of the request changes after the first
			res.Payload.RequestInfo = requestInfo(ctx, req.Header(), req.Msg)
		}
		sleep(delay)
		if err := stream.Send(res); err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
	}
	if def.GetError() == nil {
		return nil
	}
	if len(data) == 0 {
		return errorOf(def.GetError(), requestInfo(ctx, req.Header(), req.Msg))
	}
	return errorOf(def.GetError(), nil)
}

func (service) BidiStream(ctx context.Context, stream *connect.BidiStream[v1.BidiStreamRequest, v1.BidiStreamResponse]) error {
	var def *v1.StreamResponseDefinition
	var fullDuplex bool
	var delay time.Duration
	var reqs []proto.Message // received since the last response
	sent := 0
	for first := true; ; first = false {
		msg, err := stream.Receive()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		reqs = append(reqs, msg)
		if first {
			def, fullDuplex = msg.GetResponseDefinition(), msg.GetFullDuplex()
			addHeaders(stream.ResponseHeader(), def.GetResponseHeaders())
			addHeaders(stream.ResponseTrailer(), def.GetResponseTrailers())
			delay = time.Duration(def.GetResponseDelayMs()) * time.Millisecond
			// Full duplex sends its headers at once; half duplex must wait
			// for the end of the client's upload before it sends anything.
			if fullDuplex && len(def.GetResponseData()) > 0 {
				if err := stream.Send(nil); err != nil {
					return connect.NewError(connect.CodeInternal, err)
				}
			}
		}
		if !fullDuplex {
			continue
		}
		// Full duplex: one response per request, while there are any.
		if sent >= len(def.GetResponseData()) {
			break
		}
		info := &v1.ConformancePayload_RequestInfo{Requests: anys(reqs...)}
		if sent == 0 {
			info = requestInfo(ctx, stream.RequestHeader(), reqs...)
		}
		sleep(delay)
		res := &v1.BidiStreamResponse{Payload: &v1.ConformancePayload{Data: def.GetResponseData()[sent], RequestInfo: info}}
		if err := stream.Send(res); err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
		sent, reqs = sent+1, nil
	}
	if !fullDuplex && len(def.GetResponseData()) > 0 {
		if err := stream.Send(nil); err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
	}
	// What is left to send: all of a half-duplex stream's responses, or a
	// full-duplex stream's beyond its requests.
	for ; sent < len(def.GetResponseData()); sent++ {
		res := &v1.BidiStreamResponse{Payload: &v1.ConformancePayload{Data: def.GetResponseData()[sent]}}
		if sent == 0 {
			res.Payload.RequestInfo = requestInfo(ctx, stream.RequestHeader(), reqs...)
		}
		sleep(delay)
		if err := stream.Send(res); err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
	}
	if def.GetError() == nil {
		return nil
	}
	if sent == 0 {
		return errorOf(def.GetError(), requestInfo(ctx, stream.RequestHeader(), reqs...))
	}
	return errorOf(def.GetError(), nil)
}

// unary answers a unary or client-stream call as def asks: the payload
// (its data and the request's info), or def's error with the request's
// info in its details; def's headers and trailers either way, then def's
// delay. A nil def asks for the request's info only.
func unary(ctx context.Context, header http.Header, def *v1.UnaryResponseDefinition, reqs ...proto.Message) (*v1.ConformancePayload, error) {
	info := requestInfo(ctx, header, reqs...)
	if def == nil {
		return &v1.ConformancePayload{RequestInfo: info}, nil
	}
	if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
		addHeaders(ci.ResponseHeader(), def.GetResponseHeaders())
		addHeaders(ci.ResponseTrailer(), def.GetResponseTrailers())
	}
	if e := def.GetError(); e != nil {
		return nil, errorOf(e, info)
	}
	sleep(time.Duration(def.GetResponseDelayMs()) * time.Millisecond)
	return &v1.ConformancePayload{Data: def.GetResponseData(), RequestInfo: info}, nil
}

// requestInfo is what the server saw of a call: its request headers (in
// name order), its timeout, its requests and, for a Connect GET, its
// query parameters.
func requestInfo(ctx context.Context, header http.Header, reqs ...proto.Message) *v1.ConformancePayload_RequestInfo {
	info := &v1.ConformancePayload_RequestInfo{RequestHeaders: headersOf(header), Requests: anys(reqs...)}
	if d, ok := ctx.Deadline(); ok {
		info.TimeoutMs = proto.Int64(time.Until(d).Milliseconds())
	}
	if q, ok := ctx.Value(queryKey{}).(url.Values); ok && len(q) > 0 {
		info.ConnectGetInfo = &v1.ConformancePayload_ConnectGetInfo{QueryParams: headersOf(q)}
	}
	return info
}

// queryKey is the context key of a Connect GET request's query
// parameters (withQuery).
type queryKey struct{}

// withQuery gives next's handlers the query parameters of a GET request
// in its context, which connect-go does not expose.
func withQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			r = r.WithContext(context.WithValue(r.Context(), queryKey{}, r.URL.Query()))
		}
		next.ServeHTTP(w, r)
	})
}

// errorOf is e as a connect error, with info (if not nil) as one more
// detail.
func errorOf(e *v1.Error, info *v1.ConformancePayload_RequestInfo) *connect.Error {
	var cause error
	if m := e.GetMessage(); m != "" {
		cause = errors.New(m)
	}
	err := connect.NewError(connect.Code(e.GetCode()), cause)
	details := e.GetDetails()
	if info != nil {
		a, aerr := anypb.New(info)
		if aerr != nil {
			return connect.NewError(connect.CodeInternal, aerr)
		}
		details = append(slices.Clip(details), a)
	}
	for _, d := range details {
		ed, derr := connect.NewErrorDetail(d)
		if derr != nil {
			return connect.NewError(connect.CodeInternal, derr)
		}
		err.AddDetail(ed)
	}
	return err
}

// anys is msgs packed as Any messages (a message of this package always
// packs).
func anys(msgs ...proto.Message) []*anypb.Any {
	out := make([]*anypb.Any, 0, len(msgs))
	for _, m := range msgs {
		a, err := anypb.New(m)
		if err != nil {
			panic(err) // a generated message always marshals
		}
		out = append(out, a)
	}
	return out
}

// headersOf is h as the suite's headers, in name order.
func headersOf(h map[string][]string) []*v1.Header {
	out := make([]*v1.Header, 0, len(h))
	for k, v := range h {
		out = append(out, &v1.Header{Name: k, Value: v})
	}
	slices.SortFunc(out, func(a, b *v1.Header) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// addHeaders adds src's values to dst.
func addHeaders(dst http.Header, src []*v1.Header) {
	for _, h := range src {
		for _, v := range h.GetValue() {
			dst.Add(h.GetName(), v)
		}
	}
}

// sleep waits d, the delay a response definition asks for, whether or
// not the call's deadline passes meanwhile, as the suite's reference
// server does: its timeout cases expect the client's deadline to end the
// call, and a server answering DEADLINE_EXCEEDED at that same instant
// races the client's own (the client may read the answer's headers and
// lose its body).
func sleep(d time.Duration) {
	time.Sleep(d)
}
