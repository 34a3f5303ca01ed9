package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMountPprof checks that -pprof's handlers answer on the metrics mux:
// the goroutine profile as text, and the index of the profiles.
func TestMountPprof(t *testing.T) {
	mux := http.NewServeMux()
	mountPprof(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for path, want := range map[string]string{
		"/debug/pprof/goroutine?debug=1": "goroutine profile:",
		"/debug/pprof/":                  "trace",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: status %d, err %v, body without %q", path, resp.StatusCode, err, want)
		}
	}
}
