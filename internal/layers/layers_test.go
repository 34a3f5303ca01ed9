// Package layers holds the test that keeps levee's layering: policies,
// the admission contract and the engine (decide) know nothing of gRPC,
// Redis or Prometheus, and metrics knows nothing of gRPC.
package layers

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/levee-go/levee/"

// below are the packages under the transport, and the outside modules each
// may depend on (the standard library is always allowed).
var below = map[string][]string{
	"admission":         nil,
	"decide":            nil, // the engine: what every front-end shares
	"internal/overload": nil, // the rules of evidence of overload
	"ratelimit":         nil,
	"bulkhead":          nil,
	"breaker":           nil,
	"throttle":          nil,
	"cpu":               {"golang.org/x/sys/"},
	"memory":            {"golang.org/x/sys/"},
	"connlimit":         nil,
	"loadshed":          {"golang.org/x/sys/"}, // the CPU signal it follows (cpu.Signal), and so cpu's x/sys
	"memshed":           {"golang.org/x/sys/"}, // the memory signal it follows (memory.Signal), and so memory's x/sys
	"deadline":          nil,
	"queuedelay":        nil,
	"holdoff":           nil,
	"retrybudget":       nil,
	"runlimit":          {"golang.org/x/sys/"}, // the timerfd of its network-poll wait (Linux)
	"statuspage":        {"golang.org/x/sys/"}, // the debug page: reads the engine and the policies (runlimit's x/sys)
	"metrics":           {"github.com/prometheus/", "github.com/beorn7/perks", "github.com/cespare/xxhash", "github.com/munnerz/goautoneg", "go.yaml.in/yaml", "google.golang.org/protobuf/", "golang.org/x/sys/"},
	// The only package that imports a Redis client.
	"redislimit": {"github.com/redis/rueidis", "golang.org/x/sys/"},
	// The OTel API only: the application picks the SDK.
	"metrics/otelmetrics": {"go.opentelemetry.io/otel/metric", "go.opentelemetry.io/otel/attribute", "github.com/cespare/xxhash", "golang.org/x/sys/"},
}

// TestNoTransportBelowTheTransport lists, with `go list -deps`, what each
// package below the transport links, and fails on any package outside the
// standard library, this module and the package's allowed modules: in
// particular, no google.golang.org/grpc.
func TestNoTransportBelowTheTransport(t *testing.T) {
	for pkg, allowed := range below {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		var deps int
		for _, dep := range strings.Fields(string(out)) {
			deps++
			if strings.HasPrefix(dep, module) {
				if strings.HasPrefix(dep, module+"grpcguard") || strings.HasPrefix(dep, module+"examples") || strings.HasPrefix(dep, module+"cmd") {
					t.Errorf("%s depends on %s, a transport or program", pkg, dep)
				}
				continue
			}
			if !hasPrefix(dep, allowed) {
				t.Errorf("%s depends on %s, outside the standard library and its allowed modules %v", pkg, dep, allowed)
			}
		}
		if deps == 0 {
			t.Errorf("go list -deps %s listed nothing, not even the package itself", pkg)
		}
	}
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// TestOnlyRedislimitImportsRedis fails when a package other than
// redislimit imports a Redis client itself (linking redislimit is fine).
func TestOnlyRedislimitImportsRedis(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}}`, module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var seen int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		seen++
		if f[0] == module+"redislimit" {
			continue
		}
		for _, imp := range f[1:] {
			if strings.Contains(imp, "redis/rueidis") || strings.Contains(imp, "redis/go-redis") {
				t.Errorf("%s imports %s: only redislimit talks to Redis", f[0], imp)
			}
		}
	}
	if seen < 10 {
		t.Fatalf("go list listed %d packages, want the whole module", seen)
	}
}

// frontEnds are the transports' front-ends and what each must not link,
// so that a user of one transport compiles no other: a grpc-go server
// (grpcguard, protect) links no connect-go, a connect-go server
// (connectguard) no grpc-go, and plain net/http handlers (httpguard)
// neither.
var frontEnds = map[string][]string{
	"grpcguard":    {"connectrpc.com/"},
	"protect":      {"connectrpc.com/"},
	"connectguard": {"google.golang.org/grpc"},
	"httpguard":    {"google.golang.org/grpc", "connectrpc.com/"},
}

// TestFrontEndsLinkOneTransport lists, with `go list -deps`, what each
// front-end links, and fails on another transport's module.
func TestFrontEndsLinkOneTransport(t *testing.T) {
	for pkg, banned := range frontEnds {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) == 0 {
			t.Errorf("go list -deps %s listed nothing, not even the package itself", pkg)
		}
		for _, dep := range deps {
			if hasPrefix(dep, banned) {
				t.Errorf("%s depends on %s: a user of its transport would compile another's", pkg, dep)
			}
		}
	}
}
