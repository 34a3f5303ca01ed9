// Package affinity reads and sets the CPUs this process may run on. It
// works on Linux only; elsewhere Allowed and Pin return ErrUnsupported.
// `levee serve -cpu` pins a server to one CPU, and `levee demo` keeps its
// load generator off the CPU of its servers.
package affinity

import "errors"

// ErrUnsupported is returned by Allowed and Pin where CPU affinity is not
// supported.
var ErrUnsupported = errors.New("CPU pinning is only supported on Linux")
