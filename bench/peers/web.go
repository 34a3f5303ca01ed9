package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/levee-go/levee/examples/inventory"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/target"
)

// endpoint is how the load reaches a server: through grpc-go's client
// (the grpc-go servers, and the connect-go ones through their gRPC
// protocol), or as JSON requests to the inventory's routes
// (inventory.HTTPHandler) for the protections that serve those.
type endpoint struct {
	grpc *target.Target // nil for a JSON server
	web  *webTarget     // nil for a gRPC server
}

// dialEndpoint connects to srv as p serves it and waits until it is
// ready.
func dialEndpoint(ctx context.Context, srv *server, p protection) (endpoint, error) {
	if p.http != nil {
		w, err := dialWeb(ctx, srv.addr, serverStartTimeout)
		return endpoint{web: w}, err
	}
	t, err := target.Dial(ctx, srv.addr, 1, serverStartTimeout)
	return endpoint{grpc: t}, err
}

// Close closes the endpoint's connections.
func (e endpoint) Close() {
	if e.grpc != nil {
		e.grpc.Close()
	}
	if e.web != nil {
		e.web.Close()
	}
}

// allocateCall returns a CallFunc that allocates one unit of a SKU for a
// fresh order per request, as target.Target.AllocateCall does.
func (e endpoint) allocateCall(runID string) loadgen.CallFunc {
	if e.web == nil {
		return e.grpc.AllocateCall(runID)
	}
	skus := inventory.DefaultSKUs()
	return func(ctx context.Context) error {
		id, _ := loadgen.RequestID(ctx)
		return e.web.allocate(ctx, &inventoryv1.AllocateRequest{
			Sku:      skus[id%uint64(len(skus))],
			Quantity: 1,
			OrderId:  runID + "-" + strconv.FormatUint(id, 10),
		})
	}
}

// getStockCall returns a CallFunc that reads the stock of a SKU.
func (e endpoint) getStockCall() loadgen.CallFunc {
	if e.web != nil {
		return e.web.getStockCall()
	}
	return e.grpc.GetStockCall()
}

// The paths of the inventory's JSON routes: Allocate's, and GetStock's
// before its SKU.
var (
	_, allocatePath, _ = strings.Cut(inventory.RouteAllocate, " ")
	_, stockRoute, _   = strings.Cut(inventory.RouteGetStock, " ")
	stockPath          = strings.TrimSuffix(stockRoute, "{sku}")
)

// webTarget is an inventory server's JSON routes, reached over cleartext
// HTTP/2 (h2c), as the gRPC load reaches its servers: one connection
// multiplexes the calls, and a call that runs out of time resets its
// stream, not a connection. Create it with dialWeb; it is safe for
// concurrent use.
type webTarget struct {
	base string // "http://" + the server's address
	tr   *http.Transport
}

// dialWeb returns the JSON routes of the server at addr once its
// /healthz answers 200, at most readyTimeout.
func dialWeb(ctx context.Context, addr string, readyTimeout time.Duration) (*webTarget, error) {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	w := &webTarget{base: "http://" + addr, tr: tr}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		err := w.do(ctx, http.MethodGet, "/healthz", nil)
		if err == nil {
			return w, nil
		}
		select {
		case <-ctx.Done():
			w.Close()
			return nil, fmt.Errorf("%s is not serving after %v: %v", w.base, readyTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close closes the target's idle connections.
func (w *webTarget) Close() { w.tr.CloseIdleConnections() }

// allocate sends req to the Allocate route.
func (w *webTarget) allocate(ctx context.Context, req *inventoryv1.AllocateRequest) error {
	body, err := protojson.Marshal(req)
	if err != nil {
		return err
	}
	return w.do(ctx, http.MethodPost, allocatePath, body)
}

// getStockCall returns a CallFunc that reads the stock of a SKU from the
// GetStock route.
func (w *webTarget) getStockCall() loadgen.CallFunc {
	skus := inventory.DefaultSKUs()
	return func(ctx context.Context) error {
		id, _ := loadgen.RequestID(ctx)
		return w.do(ctx, http.MethodGet, stockPath+skus[id%uint64(len(skus))], nil)
	}
}

// do sends one request and reads its whole answer. Its error is a gRPC
// status error of the code webCode gives the answer's status, so that
// loadgen counts the refusals, the timeouts and the failures of every
// transport alike; a request whose context ends gets the context's error.
func (w *webTarget) do(ctx context.Context, method, path string, body []byte) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, w.base+path, r)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := w.tr.RoundTrip(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Not a refusal: a failure of the connection.
		return status.Error(codes.Unknown, err.Error())
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if res.StatusCode == http.StatusOK {
		return nil
	}
	return status.Errorf(webCode(res.StatusCode), "HTTP %d", res.StatusCode)
}

// webCode is the gRPC code of an HTTP status that is not 200, as
// grpc-gateway maps codes to statuses (inventory.HTTPHandler answers
// them so): 429 RESOURCE_EXHAUSTED and 503 UNAVAILABLE, the refusals of
// every protection here (failsafehttp answers 429, httpguard 429 or 503),
// 504 DEADLINE_EXCEEDED (a timeout, or httpguard's refusal of a deadline
// that cannot be met, as grpc-go's), and UNKNOWN for anything else.
func webCode(s int) codes.Code {
	switch s {
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	case 499:
		return codes.Canceled
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusConflict:
		return codes.Aborted
	case http.StatusInternalServerError:
		return codes.Internal
	}
	return codes.Unknown
}
