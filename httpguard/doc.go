// Package httpguard is levee's front-end for plain net/http handlers: the
// protection of a gRPC server (see package protect) for JSON or any other
// HTTP API, on the engine (package decide) that a grpc-go server
// (grpcguard) and connect-go handlers (connectguard) of the same process
// share.
//
// A refused request gets 429 or 503 (as the rule says; 504 for a
// deadline that cannot be met), Retry-After in whole seconds, and a
// google.rpc.Status in JSON with the same details a gRPC client gets
// (WriteRefusal). SetRetryAfter gives a grpc-gateway in front of a
// protected gRPC server the Retry-After header it does not set.
package httpguard
