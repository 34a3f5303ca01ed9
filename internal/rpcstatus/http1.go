package rpcstatus

import "net/http"

// AnswerBeforeBody lets a refusal written to w for r go out before r's
// body has arrived. For an HTTP/1.x request whose handler left its body
// unread, net/http reads up to 256 KiB of it before it writes the
// response's headers, to keep the connection: a refusal then waits for a
// client that is still uploading, and never reaches one that waits for an
// answer before it sends more (a bidirectional stream over HTTP/1.1).
// With full duplex on, the response goes first and net/http reads or
// drops what is left of the body after it. HTTP/2 never waits, and r is
// left alone there (asking its writer would allocate an error); so is a
// writer that cannot (a wrapper with no Unwrap method).
func AnswerBeforeBody(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		_ = http.NewResponseController(w).EnableFullDuplex()
	}
}
