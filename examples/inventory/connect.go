package inventory

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1/inventoryv1connect"
)

// ConnectHandler returns the inventory service svc (a *Server, or one
// that wraps it) for connect-go: one http.Handler that serves the
// Connect, gRPC and gRPC-Web protocols, with
// the standard health service (grpchealth, SERVING for "" and
// ServiceName) and server reflection (grpcreflect, v1 and v1alpha), so
// that grpcurl, ghz, buf curl and curl all reach it. Serve it over
// HTTP/1.1 and cleartext HTTP/2 (http.Server.Protocols with
// SetUnencryptedHTTP2) or TLS. opts apply to the inventory service's
// handlers (connect.WithInterceptors, say); the service's errors, gRPC
// statuses, reach them as connect errors of the same code. The returned
// checker reports NOT_SERVING after SetStatus, for a graceful shutdown.
func ConnectHandler(svc inventoryv1connect.InventoryServiceHandler, opts ...connect.HandlerOption) (http.Handler, *grpchealth.StaticChecker) {
	mux := http.NewServeMux()
	opts = append(opts[:len(opts):len(opts)], connect.WithInterceptors(statusErrors{}))
	mux.Handle(inventoryv1connect.NewInventoryServiceHandler(svc, opts...))
	checker := grpchealth.NewStaticChecker(ServiceName)
	mux.Handle(grpchealth.NewHandler(checker))
	reflector := grpcreflect.NewStaticReflector(ServiceName, grpchealth.HealthV1ServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	return mux, checker
}

// statusErrors turns the gRPC statuses the inventory service returns into
// connect errors of the same code and message: connect-go reads an error
// it does not know as UNKNOWN.
type statusErrors struct{}

func (statusErrors) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		return res, connectError(err)
	}
}

func (statusErrors) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (statusErrors) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return connectError(next(ctx, conn))
	}
}

// connectError returns err as a *connect.Error when it is a gRPC status,
// and err itself otherwise.
func connectError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	return connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
}
