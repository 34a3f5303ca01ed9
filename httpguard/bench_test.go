package httpguard

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/levee-go/levee/internal/guardtest"
)

// BenchmarkMiddleware compares a handler, bare and behind the Guard's
// middleware (a guard that admits everything: what the front-end costs,
// not the guards).
func BenchmarkMiddleware(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for _, mode := range []string{"bare", "middleware"} {
		b.Run(mode, func(b *testing.B) {
			var h http.Handler = handler
			if mode == "middleware" {
				h = newGuard(b, 0, guardtest.Pass{}).Middleware(handler)
			}
			req := httptest.NewRequest(http.MethodGet, "/v1/items", nil)
			req.Pattern = "GET /v1/items"
			req.Header.Set("X-Tenant-Id", "acme")
			w := &guardtest.DiscardWriter{H: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, req)
			}
		})
	}
}
