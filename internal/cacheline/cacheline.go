// Package cacheline gives the size of a cache line on the architecture a
// program is built for, to pad what every call writes away from what
// every call reads (false sharing). It uses the standard library only,
// so that the policy core (deadline, runlimit) may import it.
package cacheline

// Size is the cache line's size in bytes, as golang.org/x/sys/cpu gives
// it for the architecture, and at least 64: 128 on arm64 (whose Apple
// processors have 128-byte lines) and on ppc64, 256 on s390x, 64
// elsewhere (amd64).
const Size = size
