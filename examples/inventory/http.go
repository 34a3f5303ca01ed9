package inventory

import (
	"context"
	"errors"
	"io"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
)

// The JSON routes of the inventory service (HTTPHandler), one per method,
// and the gRPC method each serves.
const (
	// RouteAllocate takes an AllocateRequest in JSON and answers an
	// AllocateResponse.
	RouteAllocate = "POST /v1/allocate"
	// RouteRelease takes a ReleaseRequest in JSON and answers a
	// ReleaseResponse.
	RouteRelease = "POST /v1/release"
	// RouteGetStock answers the GetStockResponse of the SKU in its path.
	RouteGetStock = "GET /v1/stock/{sku}"
)

// HTTPMethods maps each JSON route pattern (http.Request.Pattern) to the
// full gRPC method it serves, so that a protection that names methods
// (a policy file's rules) names the same flows on every transport.
var HTTPMethods = map[string]string{
	RouteAllocate: "/" + ServiceName + "/Allocate",
	RouteRelease:  "/" + ServiceName + "/Release",
	RouteGetStock: "/" + ServiceName + "/GetStock",
}

// maxJSONBody bounds a JSON request body.
const maxJSONBody = 1 << 20

// HTTPHandler returns the inventory service as plain JSON over HTTP, a
// route per method (RouteAllocate, RouteRelease, RouteGetStock), with
// messages in protojson. An error answers the HTTP status of its gRPC
// code (as grpc-gateway maps them: 400 INVALID_ARGUMENT and
// FAILED_PRECONDITION, 404 NOT_FOUND, 409 ALREADY_EXISTS, 504
// DEADLINE_EXCEEDED, 499 CANCELED) and a google.rpc.Status in JSON; a body
// that is not the method's message in JSON (or above 1 MiB) answers 400.
// GET /healthz answers 200. Each method's route is wrapped in middleware,
// the first outermost (httpguard's Middleware, say, so that the route's
// pattern names the request's flow); /healthz is not.
func HTTPHandler(srv *Server, middleware ...func(http.Handler) http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	handle := func(pattern string, h http.Handler) {
		for i := len(middleware) - 1; i >= 0; i-- {
			h = middleware[i](h)
		}
		mux.Handle(pattern, h)
	}
	handle(RouteAllocate, jsonRoute(func(ctx context.Context, r *http.Request) (proto.Message, error) {
		req := &inventoryv1.AllocateRequest{}
		if err := readJSON(r, req); err != nil {
			return nil, err
		}
		return srv.Allocate(ctx, req)
	}))
	handle(RouteRelease, jsonRoute(func(ctx context.Context, r *http.Request) (proto.Message, error) {
		req := &inventoryv1.ReleaseRequest{}
		if err := readJSON(r, req); err != nil {
			return nil, err
		}
		return srv.Release(ctx, req)
	}))
	handle(RouteGetStock, jsonRoute(func(ctx context.Context, r *http.Request) (proto.Message, error) {
		return srv.GetStock(ctx, &inventoryv1.GetStockRequest{Sku: r.PathValue("sku")})
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// readJSON reads r's body, a message in JSON, into m.
func readJSON(r *http.Request, m proto.Message) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxJSONBody+1))
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "inventory: reading the body: %v", err)
	}
	if len(body) > maxJSONBody {
		return status.Errorf(codes.InvalidArgument, "inventory: body above %d bytes", maxJSONBody)
	}
	if err := protojson.Unmarshal(body, m); err != nil {
		return status.Errorf(codes.InvalidArgument, "inventory: body is not a %s in JSON: %v", m.ProtoReflect().Descriptor().Name(), err)
	}
	return nil
}

// jsonRoute serves one method: it answers its response in JSON, or its
// error as a google.rpc.Status in JSON with the code's HTTP status.
func jsonRoute(call func(context.Context, *http.Request) (proto.Message, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		res, err := call(r.Context(), r)
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			st := status.Convert(err)
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				st = status.FromContextError(err)
			}
			body, _ := protojson.Marshal(st.Proto())
			w.WriteHeader(httpStatus(st.Code()))
			_, _ = w.Write(body)
			return
		}
		body, err := protojson.Marshal(res)
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_, _ = w.Write(body)
	}
}

// httpStatus is the HTTP status of a gRPC code, as grpc-gateway maps it.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
