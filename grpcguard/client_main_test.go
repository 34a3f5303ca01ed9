package grpcguard

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: the gRPC servers
// and connections the tests start, and the context watchers of streams.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
