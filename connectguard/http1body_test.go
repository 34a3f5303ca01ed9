package connectguard

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/internal/guardtest"
)

// A call the middleware refuses over HTTP/1.1 is answered at once,
// whatever of its body the client has not sent yet: the refusal reads no
// body. net/http, before it writes a response's headers, reads up to 256
// KiB of a body the handler left unread (to keep the connection), so the
// refusal waited for a client still sending (a slow upload) or one that
// waits for the answer before it sends more (a bidi stream over
// HTTP/1.1, which connect-go itself answers 505 at once).
func TestRefusalOverHTTP1DoesNotWaitForTheBody(t *testing.T) {
	msgBytes, _ := proto.Marshal(wrapperspb.String("hi"))
	envelope := make([]byte, 5, 5+len(msgBytes))
	binary.BigEndian.PutUint32(envelope[1:], uint32(len(msgBytes)))
	envelope = append(envelope, msgBytes...)
	tests := []struct {
		name   string
		head   string // request line and headers
		sent   []byte // what the client sends of the body before waiting
		status int    // the refusal's: an error status for unary, 200 for a stream (its error ends the stream)
	}{
		{
			name:   "connect unary upload, 100 KB announced, 1 KB sent",
			head:   "POST " + procUnary + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/proto\r\nContent-Length: 100000\r\n\r\n",
			sent:   bytes.Repeat([]byte{'x'}, 1000),
			status: http.StatusTooManyRequests,
		},
		{
			name:   "connect bidi stream, one message sent, request left open",
			head:   "POST " + procBidi + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+proto\r\nConnect-Protocol-Version: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
			sent:   []byte(strconv.FormatInt(int64(len(envelope)), 16) + "\r\n" + string(envelope) + "\r\n"),
			status: http.StatusOK,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fg := &guardtest.Forced{}
			fg.Set(admission.RefuseFor(admission.CauseRunQueueFull, admission.EvidenceStanding, "too many calls waiting", time.Second), admission.Decision{})
			g := newGuard(t, 0, fg)
			var runs atomic.Int64
			url := serveH2C(t, g.Middleware(echoHandlers(&runs, connect.WithInterceptors(g.Interceptor()))))
			res := guardtest.HTTP1Head(t, url, append([]byte(tt.head), tt.sent...))
			if res.StatusCode != tt.status || runs.Load() != 0 {
				t.Errorf("status %d after %d handler runs, want %d and none", res.StatusCode, runs.Load(), tt.status)
			}
		})
	}
}
