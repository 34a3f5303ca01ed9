// Package connlimit protects a server's listener: a cap on the
// connections open at once, in all and from one client, and on the rate
// of new ones, with the connections beyond the caps answered cheaply
// ([Listener]).
//
// Connections are the first resource a flood takes: each one a file
// descriptor, a grpc-go transport with its reader, writer and keepalive
// goroutines and its buffers, before any call is admitted. A cap keeps
// the connections the server has serving while a flood of new ones is
// turned away at the cost of an accept and a close each.
//
// What a client beyond the caps sees depends on the [Mode]: with
// [Refuse] (the default) its connection is reset right after it is
// established, so a grpc-go client reports the address unavailable
// ("connection reset by peer" or "EOF" before the server preface), backs
// off (1 s, growing to 120 s, jittered) and uses its other addresses
// meanwhile; with [Hold] it waits, connected but unanswered, until this
// server accepts it or its connect timeout (20 s in grpc-go) expires.
//
// Package connlimit knows nothing of gRPC; it works under any server
// that takes a net.Listener.
package connlimit
