// Package layers holds the test that keeps levee's layering: policies and
// the admission engine know nothing of gRPC, Redis or Prometheus, and
// metrics knows nothing of gRPC.
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
	"admission":   nil,
	"ratelimit":   nil,
	"bulkhead":    nil,
	"breaker":     nil,
	"throttle":    nil,
	"cpu":         {"golang.org/x/sys/"},
	"loadshed":    nil,
	"deadline":    nil,
	"queuedelay":  nil,
	"holdoff":     nil,
	"retrybudget": nil,
	"runlimit":    nil,
	"metrics":     {"github.com/prometheus/", "github.com/beorn7/perks", "github.com/cespare/xxhash", "github.com/munnerz/goautoneg", "go.yaml.in/yaml", "google.golang.org/protobuf/", "golang.org/x/sys/"},
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
