package httpguard

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
)

// responseWriter is the http.ResponseWriter a guarded handler gets: it
// records the status the handler answers, which tells an overload
// (OverloadStatus) from a success or an application error, and passes
// everything else to the writer it wraps, keeping what that writer can
// do: http.Flusher, http.Hijacker and io.ReaderFrom (sendfile) by
// method, and the rest (SetReadDeadline, EnableFullDuplex, ...) through
// Unwrap for http.ResponseController. Where the wrapped writer cannot
// flush or hijack, Flush does nothing and Hijack returns
// http.ErrNotSupported, as http.ResponseController does.
//
// They are pooled: a handler must not keep one after it returns, which
// net/http forbids anyway.
type responseWriter struct {
	w        http.ResponseWriter
	status   int  // 0 until the handler answers a final status
	streamed bool // the handler flushed or hijacked: a stream, not a call
}

var writers = sync.Pool{New: func() any { return new(responseWriter) }}

func wrapWriter(w http.ResponseWriter) *responseWriter {
	rw := writers.Get().(*responseWriter)
	rw.w, rw.status, rw.streamed = w, 0, false
	return rw
}

func (rw *responseWriter) release() {
	rw.w = nil
	writers.Put(rw)
}

// Header returns the wrapped writer's header.
func (rw *responseWriter) Header() http.Header { return rw.w.Header() }

// WriteHeader records a final status (not a 1xx, which may come first),
// and writes code.
func (rw *responseWriter) WriteHeader(code int) {
	if rw.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		rw.status = code
	}
	rw.w.WriteHeader(code)
}

// Write writes b, with a 200 status unless one was written.
func (rw *responseWriter) Write(b []byte) (int, error) {
	rw.answered()
	return rw.w.Write(b)
}

func (rw *responseWriter) answered() {
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
}

// Flush sends what is buffered, with a 200 status unless one was
// written; it does nothing when the wrapped writer cannot flush.
func (rw *responseWriter) Flush() {
	rw.answered()
	rw.streamed = true
	if f, ok := rw.w.(http.Flusher); ok {
		f.Flush()
		return
	}
	_ = http.NewResponseController(rw.w).Flush()
}

// Hijack hands the connection to the handler (HTTP/1.x), or returns
// http.ErrNotSupported.
func (rw *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, buf, err := http.NewResponseController(rw.w).Hijack()
	if err == nil {
		rw.streamed = true
		if rw.status == 0 {
			rw.status = http.StatusSwitchingProtocols
		}
	}
	return c, buf, err
}

// ReadFrom copies r to the response, by the wrapped writer's ReadFrom
// when it has one (net/http's uses sendfile for a file).
func (rw *responseWriter) ReadFrom(r io.Reader) (int64, error) {
	rw.answered()
	if rf, ok := rw.w.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{rw.w}, r)
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (rw *responseWriter) Unwrap() http.ResponseWriter { return rw.w }

// writerOnly hides every method but Write, so that io.Copy does not call
// ReadFrom back.
type writerOnly struct{ io.Writer }
