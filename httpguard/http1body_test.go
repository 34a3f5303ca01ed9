package httpguard

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/guardtest"
)

// A request the middleware refuses over HTTP/1.1 is answered at once,
// whatever of its body the client has not sent yet. Today net/http, before
// it writes the refusal's headers, reads up to 256 KiB of the body the
// handler left unread (to keep the connection alive), so the refusal of an
// upload without Expect: 100-continue waits for the client to send its
// body (and reads it): a slow uploader holds the refusal, and the server
// reads what it refused.
func TestRefusalOverHTTP1DoesNotWaitForTheBody(t *testing.T) {
	fg := &guardtest.Forced{}
	fg.Set(refused, admission.Decision{})
	var runs atomic.Int64
	ts := httptest.NewServer(newGuard(t, 0, fg).Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs.Add(1) })))
	defer ts.Close()
	res := guardtest.HTTP1Head(t, ts.URL, append([]byte("PUT /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"), bytes.Repeat([]byte{'x'}, 1000)...))
	if res.StatusCode != http.StatusTooManyRequests || runs.Load() != 0 {
		t.Errorf("status %d after %d handler runs, want 429 and none", res.StatusCode, runs.Load())
	}
}
