//go:build ppc64 || ppc64le

package cacheline

const size = 128
