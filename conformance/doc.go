// Package conformance holds levee's conformance suite, and only that: its
// tests run grpc-go's own interop test cases (google.golang.org/grpc/interop,
// every case that needs no cloud credentials) and cases of levee's own
// against a server protected by protect.New(), over loopback TCP, so that
// levee keeps every gRPC semantic it does not mean to change and refuses
// nothing while the server is healthy.
//
// Every case runs in three configurations, with a fresh server and client
// for each case:
//
//	A  grpc.NewServer() and a plain client: the baseline, which proves the
//	   harness (every case must pass here)
//	B  a server protected by protect.New(), a plain client
//	C  the same server, the client with grpcguard.NewClient()'s interceptors
//
// The server is grpc-go's interop server: interop.NewTestServer with an
// application ORCA recorder (orca.CallMetricsServerOption and an
// out-of-band service), the application's options first and levee's
// appended, as a user adding levee to a server would. For the interop
// cases the client names grpc-go's test_backend_metrics_load_balancer in
// its service config, as grpc-go's interop script does; that balancer
// keeps an out-of-band ORCA stream open on every connection. levee's own
// cases use a client with no service config, so that the only streams
// open are the case's own.
//
// The tests:
//
//	TestInterop                            grpc-go's 18 interop cases
//	TestInteropORCAWithLevee               the ORCA cases with protect.WithORCA beside
//	                                       the application's recorder, its option before
//	                                       levee's and after: one report per call
//	TestIdleStreams                        1000 idle bidi streams, then unary calls
//	TestLongStreamThenShortDeadlines       a 1.6s stream, then calls with 150ms deadlines
//	TestApplicationErrorsThenHealthyCalls  UNKNOWN and INVALID_ARGUMENT answers, then
//	                                       healthy calls: none refused on the client
//	TestStreamDeadlinePassesWhileIdle      streams whose deadline passes outside Send
//	                                       and Recv (under -race)
//
// Run it with
//
//	go test -race -count=1 ./conformance
//
// It is part of make test. Each case has its own timeout.
//
// connectrpc/conformance's server suite, through connectguard on the same
// preset, is in conformance/connectsuite, a module of its own.
package conformance
