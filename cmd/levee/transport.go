package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"google.golang.org/grpc"

	"github.com/levee-go/levee/connectguard"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/examples/inventory"
	"github.com/levee-go/levee/httpguard"
)

// The transports of `levee serve -transport`.
const (
	transportGRPC    = "grpc"    // grpc-go, with reflection and health
	transportConnect = "connect" // connect-go: Connect, gRPC and gRPC-Web on one port, h2c and HTTP/1.1
	transportHTTP    = "http"    // plain JSON over net/http, a route per method
)

// checkTransport returns a usage error unless name is a transport.
func checkTransport(name string) error {
	switch name {
	case transportGRPC, transportConnect, transportHTTP:
		return nil
	}
	return usageError("-transport must be %s, %s or %s, got %q", transportGRPC, transportConnect, transportHTTP, name)
}

// headerNameOK reports whether clients of transport can send a header
// called name, in any case: with grpc a gRPC metadata key ([0-9a-z-_.]
// once lowercased, as grpc-go wants), over HTTP a header field name (an
// RFC 9110 token).
func headerNameOK(name, transport string) bool {
	chars := "abcdefghijklmnopqrstuvwxyz0123456789-_."
	if transport != transportGRPC {
		chars += "!#$%&'*+^`|~"
	}
	return name != "" && strings.Trim(strings.ToLower(name), chars) == ""
}

// rpcServer is the inventory service served through one transport.
type rpcServer interface {
	// serve serves on lis until stop.
	serve(lis net.Listener) error
	// stop reports NOT_SERVING, lets running calls finish within grace,
	// then cuts off what is left.
	stop(grace time.Duration)
}

// newRPCServer returns srv served through transport, protected by prot
// (its grpc options for grpc-go, its engine for the others; the zero
// protection: unprotected), with cf's connection guards for grpc-go.
func newRPCServer(transport string, srv *inventory.Server, prot protection, cf *connFlags) (rpcServer, error) {
	switch transport {
	case transportConnect:
		return connectServer(srv, prot.engine)
	case transportHTTP:
		return jsonServer(srv, prot.engine)
	}
	opts := append(prot.grpc[:len(prot.grpc):len(prot.grpc)], cf.serverOptions()...)
	hs := inventory.NewHealth()
	gs, err := cf.server(func() *grpc.Server {
		s := grpc.NewServer(opts...)
		inventory.RegisterWith(s, srv, hs)
		return s
	}, prot.preset)
	if err != nil {
		return nil, err
	}
	return &grpcServer{gs: gs, health: hs}, nil
}

type grpcServer struct {
	gs     grpcServing // a *grpc.Server, or a *goaway.Server with -goaway
	health interface{ Shutdown() }
}

func (s *grpcServer) serve(lis net.Listener) error { return s.gs.Serve(lis) }

func (s *grpcServer) stop(grace time.Duration) {
	s.health.Shutdown()
	stopped := make(chan struct{})
	go func() {
		s.gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(grace):
		s.gs.Stop()
		<-stopped
	}
}

// connectServer serves srv with connect-go (inventory.ConnectHandler),
// behind connectguard's middleware and interceptor on e (nil:
// unprotected).
func connectServer(srv *inventory.Server, e *decide.Engine) (rpcServer, error) {
	var opts []connect.HandlerOption
	wrap := func(h http.Handler) http.Handler { return h }
	if e != nil {
		g, err := connectguard.New(e)
		if err != nil {
			return nil, err
		}
		opts = append(opts, connect.WithInterceptors(g.Interceptor()))
		wrap = g.Middleware
	}
	h, checker := inventory.ConnectHandler(srv, opts...)
	return newHTTPServer(wrap(h), func() {
		checker.SetStatus("", grpchealth.StatusNotServing)
		checker.SetStatus(inventory.ServiceName, grpchealth.StatusNotServing)
	}), nil
}

// jsonServer serves srv as JSON routes (inventory.HTTPHandler), each
// behind httpguard's middleware on e (nil: unprotected), its flow named
// after the gRPC method it serves, so that a policy's method rules
// govern it as they govern the gRPC calls.
func jsonServer(srv *inventory.Server, e *decide.Engine) (rpcServer, error) {
	var mw []func(http.Handler) http.Handler
	if e != nil {
		g, err := httpguard.New(e, httpguard.WithFlow(func(r *http.Request) string {
			if m, ok := inventory.HTTPMethods[r.Pattern]; ok {
				return m
			}
			return r.Pattern
		}))
		if err != nil {
			return nil, err
		}
		mw = append(mw, g.Middleware)
	}
	return newHTTPServer(inventory.HTTPHandler(srv, mw...), func() {}), nil
}

// httpServer serves a handler over HTTP/1.1 and cleartext HTTP/2 (h2c),
// so that ghz, grpcurl, grpc-go and curl all reach it without TLS.
type httpServer struct {
	hs         *http.Server
	notServing func()
}

func newHTTPServer(h http.Handler, notServing func()) *httpServer {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, Protocols: new(http.Protocols)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	return &httpServer{hs: hs, notServing: notServing}
}

func (s *httpServer) serve(lis net.Listener) error {
	if err := s.hs.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", err)
	}
	return nil
}

func (s *httpServer) stop(grace time.Duration) {
	s.notServing()
	shutdownHTTP(s.hs, grace)
}

// shutdownHTTP stops hs: it lets the requests running finish within
// grace, then closes their connections.
func shutdownHTTP(hs *http.Server, grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		_ = hs.Close()
	}
}
