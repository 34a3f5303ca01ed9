package httpguard

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A handler behind the wrapper can still flush, hijack, use
// http.ResponseController, and copy a reader; and the wrapper records the
// final status it answered.
func TestResponseWriterKeepsWhatTheWriterCan(t *testing.T) {
	statuses := make(chan int, 1)
	wrap := func(h http.HandlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rw := wrapWriter(w)
			h(rw, r)
			statuses <- rw.status
			rw.release()
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/flush", wrap(func(w http.ResponseWriter, _ *http.Request) {
		if _, ok := w.(http.Flusher); !ok {
			t.Error("wrapped writer is not an http.Flusher")
		}
		if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("ResponseController.SetWriteDeadline through the wrapper: %v", err)
		}
		w.WriteHeader(http.StatusEarlyHints) // informational: not the final status
		_, _ = io.WriteString(w, "one\n")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "two\n")
	}))
	mux.Handle("/hijack", wrap(func(w http.ResponseWriter, _ *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("wrapped writer is not an http.Hijacker")
			return
		}
		c, buf, err := hj.Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		defer c.Close()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		_ = buf.Flush()
	}))
	mux.Handle("/copy", wrap(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.Copy(w, strings.NewReader("copied"))
	}))
	ts := httptest.NewServer(mux)
	defer ts.Close()

	for _, tt := range []struct {
		path, wantBody string
		wantStatus     int
	}{
		{"/flush", "one\ntwo\n", http.StatusOK},
		{"/hijack", "hijacked", http.StatusSwitchingProtocols},
		{"/copy", "copied", http.StatusTeapot},
	} {
		res, err := ts.Client().Get(ts.URL + tt.path)
		if err != nil {
			t.Fatalf("GET %s: %v", tt.path, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != tt.wantBody {
			t.Errorf("GET %s body = %q, want %q", tt.path, b, tt.wantBody)
		}
		if got := <-statuses; got != tt.wantStatus {
			t.Errorf("GET %s: wrapper recorded status %d, want %d", tt.path, got, tt.wantStatus)
		}
	}
}

// Over a writer that cannot hijack (an HTTP/2 stream, a recorder), Hijack
// says so rather than panicking, and Flush does what the writer can.
func TestResponseWriterWithoutHijacker(t *testing.T) {
	rec := httptest.NewRecorder()
	rw := wrapWriter(rec)
	defer rw.release()
	if _, _, err := rw.Hijack(); !errors.Is(err, http.ErrNotSupported) {
		t.Errorf("Hijack over a recorder = %v, want http.ErrNotSupported", err)
	}
	rw.Flush()
	if !rec.Flushed || rw.status != http.StatusOK {
		t.Errorf("Flush: recorder flushed %v, status %d; want true, 200", rec.Flushed, rw.status)
	}
	var plain struct{ http.ResponseWriter } // neither Flusher nor ReaderFrom
	plain.ResponseWriter = httptest.NewRecorder()
	rw2 := wrapWriter(plain)
	defer rw2.release()
	rw2.Flush() // nothing to flush through: no panic
	if n, err := rw2.ReadFrom(strings.NewReader("abc")); n != 3 || err != nil {
		t.Errorf("ReadFrom over a plain writer = %d, %v; want 3, nil", n, err)
	}
}
