package cpu

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if runChild() {
		return
	}
	goleak.VerifyTestMain(m)
}
