// Package connectguard is levee's front-end for connect-go
// (connectrpc.com/connect): the protection of a grpc-go server, for the
// Connect, gRPC and gRPC-Web protocols that connect-go handlers serve, on
// the engine (package decide) that a grpc-go server (grpcguard) and plain
// net/http handlers (httpguard) of the same process share:
//
//	p, err := protect.New()
//	if err != nil { ... }
//	defer p.Stop()
//	g, err := connectguard.New(p.Engine())
//	if err != nil { ... }
//	mux := http.NewServeMux()
//	mux.Handle(fooconnect.NewFooServiceHandler(svc, connect.WithInterceptors(g.Interceptor())))
//	srv := &http.Server{Handler: g.Middleware(mux)}
//
// The middleware refuses before connect-go reads a request's body,
// reading its deadline from the Connect-Timeout-Ms or Grpc-Timeout header
// as connect-go does; the interceptor takes the call's turn to run and
// finishes it with its outcome. A refusal carries the rule's code, a
// google.rpc.ErrorInfo (domain levee, a reason of decide.Reason's list),
// RetryInfo, QuotaFailure for a per-key refusal, and Retry-After and
// Grpc-Retry-Pushback-Ms in its metadata, in every protocol. See Guard,
// and docs/connect.md.
package connectguard
