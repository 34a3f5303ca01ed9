package httpguard

import (
	"net/http"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/levee-go/levee/internal/rpcstatus"
)

// RetryAfterHeader is the HTTP header that tells a client when to retry
// (RFC 9110 §10.2.3): levee writes it in whole seconds.
const RetryAfterHeader = "Retry-After"

// SetRetryAfter sets h's Retry-After header from the google.rpc.RetryInfo
// detail of st, a gRPC error's status, and reports whether it did. It is
// for the error handler of a grpc-gateway in front of a server levee
// protects: grpc-gateway answers RESOURCE_EXHAUSTED with 429 and
// UNAVAILABLE with 503, but sets no Retry-After. Call it before the
// default handler writes the response:
//
//	runtime.WithErrorHandler(func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
//		httpguard.SetRetryAfter(w.Header(), status.Convert(err).Proto())
//		runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
//	})
//
// The delay is written in whole seconds, rounded up, at least 1. A
// status without a RetryInfo, or whose delay is negative, zero, malformed
// (seconds and nanos of different signs, nanos out of range) or beyond
// time.Duration's range (no wait helps), leaves h alone. A nil st is a
// status without details.
func SetRetryAfter(h http.Header, st *spb.Status) bool {
	for _, a := range st.GetDetails() {
		ri := &errdetails.RetryInfo{}
		if a.MessageIs(ri) && a.UnmarshalTo(ri) == nil {
			d, ok := rpcstatus.RetryDelay(ri)
			if !ok {
				continue
			}
			if v := rpcstatus.RetryAfter(d); v != "" {
				h.Set(RetryAfterHeader, v)
				return true
			}
		}
	}
	return false
}
