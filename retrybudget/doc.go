// Package retrybudget is a client's retry budget, as in the Google SRE
// book ("Handling Overload": "a per-client retry budget ... a request
// will only be retried as long as this ratio is below 10%") and Finagle's
// and Linkerd's retry budgets: over a sliding window of time, the retries
// a client makes to one downstream are at most a ratio of its requests.
//
// A Budget counts requests (first attempts, RequestAt) and retries (later
// attempts, admitted by TryRetryAt) in a ring of time bins (default 10
// seconds in 10 bins). TryRetryAt admits a retry only while
//
//	retries + 1 <= ratio × requests + min
//
// over the window, with ratio 0.1 and min 0 by default (WithMinRetries
// lets a client with little traffic retry now and then). So however many
// attempts each call may make, the attempts reaching a downstream stay
// within (1 + ratio) × the requests, plus min per window: when the
// downstream is overloaded, its clients add at most 10% to its load
// instead of multiplying it by their attempts.
//
// A Budget only counts and decides: the caller makes the retries (levee's
// gRPC client, grpcguard.WithRetries, keeps one Budget per target). It
// knows nothing of gRPC.
//
// # Concurrency
//
// A Budget is safe for concurrent use and takes no lock: each bin is two
// atomic words, each holding the bin's number and its count, so a bin
// that has expired is recognised and restarted by whoever touches it
// first. TryRetryAt counts the retry first and then checks the window, and
// takes the retry back if the window is over budget, so concurrent
// retries never overshoot the budget (they may, racing, refuse one
// another). Counts saturate at 2^24−1 per bin. Nothing allocates.
//
// Every method that depends on time has a form taking the time (RequestAt,
// TryRetryAt, SnapshotAt); the others read the wall clock.
package retrybudget
