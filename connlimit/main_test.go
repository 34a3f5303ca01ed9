package connlimit

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(floodEnv) != "" {
		os.Exit(runFlood())
	}
	goleak.VerifyTestMain(m)
}
