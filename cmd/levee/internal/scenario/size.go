package scenario

import (
	"fmt"
	"strconv"
	"strings"
)

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1},
}

// ParseSize parses a size in bytes: a number of bytes, or a number with a
// binary (KiB, MiB, GiB) or decimal (kB, MB, GB) unit, such as 8MiB or
// 1.5GB; at most 1 PiB.
func ParseSize(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), 1.0
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || !(v >= 0) || v*mult > 1<<50 {
		return 0, fmt.Errorf("want a size in bytes, or with a unit (KiB, MiB, GiB, kB, MB, GB) up to 1 PiB, got %q", s)
	}
	return int64(v * mult), nil
}

// FormatSize prints n bytes in the largest binary unit that divides it
// ("8MiB"), or as a number of bytes.
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// SizeFlag is a flag.Value holding a size in bytes, parsed by ParseSize.
// The zero value is 0 bytes.
type SizeFlag struct{ Bytes int64 }

func (f *SizeFlag) String() string {
	if f == nil {
		return "0"
	}
	return FormatSize(f.Bytes)
}

// Set parses s with ParseSize.
func (f *SizeFlag) Set(s string) error {
	v, err := ParseSize(s)
	if err != nil {
		return err
	}
	f.Bytes = v
	return nil
}
