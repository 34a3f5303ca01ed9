package httpguard

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "PUT /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
	_, _ = conn.Write(bytes.Repeat([]byte{'x'}, 1000))
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer within 3s (the server waits for the 99,000 body bytes not sent): %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || runs.Load() != 0 {
		t.Errorf("status %d after %d handler runs, want 429 and none", res.StatusCode, runs.Load())
	}
}
