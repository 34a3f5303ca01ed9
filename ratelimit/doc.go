// Package ratelimit provides token buckets: Limiter, one lock-free bucket
// with a live rate, burst and scale factor, and Keyed, many buckets by key
// (client, tenant, method, downstream) with bounded memory.
//
// A token bucket holds up to burst tokens and refills at a rate of tokens
// per second; an event is admitted when its tokens can be taken. Over any
// interval of length t a bucket admits at most burst + rate × t tokens.
//
// The API follows golang.org/x/time/rate: every time-dependent method has a
// form that takes the instant (AllowN(now, n), SetLimitAt(now, r)), and the
// wall-clock method is shorthand for it, so tests drive time explicitly and
// never sleep. Unlike x/time/rate, admission takes no lock: the bucket is one
// atomic word holding the GCRA theoretical arrival time.
//
// Policies in this package know nothing of gRPC; package grpcguard adapts
// them to interceptors.
package ratelimit
