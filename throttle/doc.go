// Package throttle is Google SRE adaptive client-side throttling ("Handling
// Overload", Site Reliability Engineering, chapter 21): a client that sees
// its backend refuse calls starts refusing calls itself, locally, before
// they cost the backend anything.
//
// Over a sliding window of time (default 2 minutes, in 1-second bins) the
// throttle counts requests and accepts — calls the backend accepted — and
// drops each new call with probability
//
//	P = max(0, (requests − K·accepts) / (requests + 1))
//
// with K = 2 by default. While the backend accepts at least one call in K,
// P is 0; beyond that the client keeps sending about K times what is
// accepted. Counts come from the window, not from the client's lifetime,
// so old history expires and the throttle recovers when the backend does.
//
// P is 0 as well while the window holds fewer than a minimum number of
// requests (WithMinRequests, default DefaultMinRequests = 100, as the SRE
// book's clients and kratos's aegis have it): without it, one success and
// two failures give P = 0.25, and a client making a few calls a minute
// drops healthy calls because of two errors. A client that sends fewer
// than the minimum in a window is never throttled: so few calls are too
// sparse to judge the backend by, and dropping them relieves it of
// little (its own refusals, and a breaker's, still apply).
//
// # Use
//
// For each call: AllowAt(now) decides; if it returns false the call must
// fail locally (ErrThrottled is the error for that); if true, make the call
// and report whether the backend accepted it with RecordAt(end, accepted).
// "Accepted" means the backend did the work, whatever the answer (a
// not-found, an invalid argument or an internal error of the application
// is accepted); only the backend's overload answers — refusals, overload
// errors and timeouts — are not. Counting application errors against the
// backend would throttle a healthy backend for its callers' mistakes.
// Allow and Record are the same at the current time.
//
// # Are throttled calls requests?
//
// The SRE book counts every call the application attempted, throttled or
// not, as a request (grpc-go's RLS throttler does too; WithThrottledCounted
// (true)). The default here counts only the calls actually sent. The two
// fit different backends:
//
//   - A backend that accepts a fraction a of the calls it receives (it
//     fails that often, however much it gets): counting only sent calls,
//     the drop rate settles at max(0, 1 − K·a) and follows a as it changes;
//     the backend still receives K·a of the calls, enough to notice its
//     recovery within about one window. Counting throttled calls as well,
//     accepts per request shrink as the throttle drops more, and for K·a < 1
//     the drop rate runs away towards 1. Recovery is then slow, because
//     almost nothing reaches the backend to show it is healthy again (the
//     "breaker never recovers" problem reported against kratos, avoided by
//     go-zero): in the package's simulation — 80% failures for 4 minutes,
//     then full health, 100 calls a second, a 2-minute window — 99.9% of
//     calls are still dropped 4 minutes after the recovery, and dropping
//     stops after about 16 minutes, against under 2 minutes when only sent
//     calls count.
//   - A backend with a fixed capacity, accepting at most a fraction a of the
//     calls the client attempts: counting throttled calls, the drop rate
//     settles at max(0, 1 − K·a) and the backend receives K times its
//     capacity, the book's design point. Counting only sent calls it
//     settles at max(0, 1 − √(K·a)): a little more traffic reaches the
//     backend (√(K·a) instead of K·a of the attempts) and is refused there.
//
// The package tests check all of these fixed points by simulation.
//
// A Throttle is safe for concurrent use; each decision takes a short lock
// and allocates nothing. The random numbers come from math/rand/v2 unless
// WithRandom supplies them.
package throttle
