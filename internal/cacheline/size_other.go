//go:build !arm64 && !ppc64 && !ppc64le && !s390x

package cacheline

const size = 64
