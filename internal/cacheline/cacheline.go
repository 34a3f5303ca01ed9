// Package cacheline gives the size of a cache line on the architecture a
// program is built for, to pad what every call writes away from what
// every call reads (false sharing).
package cacheline

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// Size is the cache line's size in bytes: golang.org/x/sys/cpu's for the
// architecture (128 on arm64, whose Apple processors have 128-byte lines,
// and on ppc64; 256 on s390x; 64 on amd64), and at least 64.
const Size = max(64, int(unsafe.Sizeof(cpu.CacheLinePad{})))
