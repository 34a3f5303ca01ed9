// Package connectguard is levee's front-end for connect-go
// (connectrpc.com/connect): the protection of a gRPC server, for the
// Connect, gRPC and gRPC-Web protocols that one connect-go handler
// serves.
//
// It reads each call's timeout as connect-go does (ConnectTimeoutHeader,
// GRPCTimeoutHeader) before the handler reads the request body, so that
// a call that cannot finish in time costs the server nothing.
package connectguard
