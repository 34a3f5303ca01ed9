// Package connectsuite runs connectrpc/conformance's server suite
// (connectrpc.com/conformance, the conformance runner of connect-go,
// grpc-go and the other Connect implementations) against a server
// protected by levee: the suite's ConformanceService, served by connect-go
// through connectguard's middleware and interceptor on protect.New(), over
// loopback. Every case must pass, and levee must refuse no call: the suite
// is a healthy load, so a refusal would be the worst bug a protection can
// have.
//
// It is a module of its own so that the runner and its dependencies (the
// connect-go v2 reference client, QUIC, CEL) stay out of levee's go.mod.
// The runner is a tool of this module (go.mod's tool directive), at a
// pinned version; the service's Go code is generated from the protos of
// that version (generate.sh), since the conformance module ships its own
// only as an internal package.
//
// The test binary is the server under test: the runner starts it once per
// server configuration (HTTP/1.1 or HTTP/2, protocol, TLS) with
// LEVEE_CONNECTSUITE_SERVE set, and each server writes what levee decided
// when the runner stops it. Run it with
//
//	cd conformance/connectsuite && go test -race -count=1 ./...
//
// make test runs it.
package connectsuite
