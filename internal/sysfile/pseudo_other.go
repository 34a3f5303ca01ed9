//go:build !linux

package sysfile

import (
	"errors"
	"os"
)

// pseudo is false off Linux: every file is read with os.ReadFile.
func pseudo(*os.File) bool { return false }

// pread is never called off Linux, where no descriptor is kept.
func pread(int, []byte, int64) (int, error) { return 0, errors.ErrUnsupported }
