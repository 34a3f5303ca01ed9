// Package goaway sends a graceful HTTP/2 GOAWAY to a share of a grpc-go
// server's connections while the server stays overloaded, so that
// clients behind an L4 load balancer reconnect and spread to other
// replicas: the "disable keepalive" action of Envoy's overload manager.
//
// # Why shards
//
// grpc-go offers no public way to send GOAWAY on one server connection.
// Its transport can drain itself (the server transport's Drain, which
// sends a GOAWAY, a ping, then the final GOAWAY), but only three callers
// reach it: keepalive's MaxConnectionIdle and MaxConnectionAge timers,
// fixed per server when each connection is created (with ±10% jitter),
// so they cannot follow an overload signal; grpc.Server.GracefulStop,
// which drains every connection of the server; and the
// PassServerTransport hook, through which a net.Conn returned by the
// listener receives its transport (grpc-go's xDS server drains
// connections this way), whose parameter type lives in grpc-go's
// internal/transport and so cannot be named outside grpc-go. Writing a
// GOAWAY frame from a net.Conn wrapper is not safe: grpc-go's framer
// owns the byte stream (a frame can be split across writes), and the
// server would not know it is draining.
//
// So a [Server] serves one listener through several grpc.Servers and
// drains one of them with GracefulStop, the public, graceful mechanism,
// while a fresh one takes its place. Each round sends GOAWAY to about
// 1/n of the connections (n shards, round robin), jittered, only after
// the overload signal has been true for a sustained period, and no call
// in flight is cut unless a grace bound says so.
package goaway
