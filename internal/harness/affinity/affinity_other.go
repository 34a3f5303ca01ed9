//go:build !linux

package affinity

// MaxCPUs is the number of CPUs a CPU set can name.
const MaxCPUs = 1024

// Allowed returns ErrUnsupported.
func Allowed() ([]int, error) { return nil, ErrUnsupported }

// Pin returns ErrUnsupported.
func Pin([]int) error { return ErrUnsupported }
