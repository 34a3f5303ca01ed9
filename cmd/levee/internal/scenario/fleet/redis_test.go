package fleet

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	"github.com/levee-go/levee/internal/redistest"
)

// TestGivenRedisKeepsOthersData: a Redis given with -redis is not the
// demo's: a pass clears the fleet limit's own keys (levee:fleet:*), not
// the rest of the server's data, nor its command statistics. The pass
// fails at once here (no replica can start), after its clean slate.
func TestGivenRedisKeepsOthersData(t *testing.T) {
	rs := redistest.Start(t)
	rs.Do("SET", "someone:else", "precious")
	rs.Do("SET", "levee:fleet:{acme}", "stale bucket")
	sets := rs.CommandCalls("set")

	c := &config{rate: DefaultRate, window: DefaultWindow}
	env := scenario.Env{Stderr: io.Discard, Exe: "/nonexistent/levee", ReadyTimeout: time.Second}
	s := scenario.Settings{StopGrace: time.Second}
	if _, err := c.runPass(context.Background(), env, s, scenario.CPUPlan{Server: -1}, &redis{addr: rs.Addr()}, passes[0]); err == nil {
		t.Fatal("runPass() error = nil, want one: no replica can start")
	}
	if got := rs.Do("GET", "someone:else"); got != "precious" {
		t.Errorf("after a pass on a given Redis, GET someone:else = %q, want %q: the demo deleted data that is not its own", got, "precious")
	}
	if got := rs.Do("EXISTS", "levee:fleet:{acme}"); got != "0" {
		t.Errorf("after a pass, EXISTS levee:fleet:{acme} = %s, want 0: the fleet's stale keys are cleared", got)
	}
	if got := rs.CommandCalls("set"); got != sets {
		t.Errorf("after a pass on a given Redis, INFO commandstats set calls = %d, want %d: the demo reset the server's statistics", got, sets)
	}
}
