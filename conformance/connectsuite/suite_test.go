package connectsuite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// serveEnv, when set, makes the test binary the server under test: the
// conformance runner starts it (os.Args[0]) once per server
// configuration, and it serves until the runner's SIGTERM. The value is
// the directory the server writes its report in.
const serveEnv = "LEVEE_CONNECTSUITE_SERVE"

func TestMain(m *testing.M) {
	if dir, ok := os.LookupEnv(serveEnv); ok {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		err := serve(ctx, os.Stdin, os.Stdout, dir)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "connectsuite server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// features is what the server under test claims, so what the runner
// tests: HTTP/1.1 and HTTP/2 (cleartext and TLS, client certificates
// too), the Connect, gRPC and gRPC-Web protocols, both codecs, identity
// and gzip, every stream kind (bidi over HTTP/2 only, as connect-go
// serves it), Connect GET and a receive limit.
const features = `features:
  versions: [HTTP_VERSION_1, HTTP_VERSION_2]
  protocols: [PROTOCOL_CONNECT, PROTOCOL_GRPC, PROTOCOL_GRPC_WEB]
  codecs: [CODEC_PROTO, CODEC_JSON]
  compressions: [COMPRESSION_IDENTITY, COMPRESSION_GZIP]
  stream_types: [STREAM_TYPE_UNARY, STREAM_TYPE_CLIENT_STREAM, STREAM_TYPE_SERVER_STREAM, STREAM_TYPE_HALF_DUPLEX_BIDI_STREAM, STREAM_TYPE_FULL_DUPLEX_BIDI_STREAM]
  supports_h2c: true
  supports_tls: true
  supports_tls_client_certs: true
  supports_trailers: true
  supports_half_duplex_bidi_over_http1: false
  supports_connect_get: true
  supports_message_receive_limit: true
`

// suiteTimeout bounds the whole run: building the runner (from the
// module cache) and the suite itself.
const suiteTimeout = 8 * time.Minute

// summary is the runner's last line but one: "N passed, M failed".
var summary = regexp.MustCompile(`(?m)^(\d+) passed, (\d+) failed`)

// serverStart is a line of the runner's (-v) that starts a server.
var serverStart = regexp.MustCompile(`(?m)^Running \d+ tests with .* for server config #\d+ `)

// TestConformanceSuite runs connectrpc/conformance's server suite (the
// runner at the version in go.mod, its reference clients: connect-go in
// every protocol, and grpc-go) against the conformance service served
// through connectguard's middleware and interceptor on protect.New(),
// over loopback. Every case must pass, and no server may have refused a
// call: the suite is a healthy load.
func TestConformanceSuite(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), suiteTimeout)
	defer cancel()
	dir := t.TempDir()

	runner := filepath.Join(dir, "connectconformance")
	build := exec.CommandContext(ctx, "go", "build", "-o", runner, "connectrpc.com/conformance/cmd/connectconformance")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build connectconformance: %v\n%s", err, out)
	}
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte(features), 0o644); err != nil {
		t.Fatal(err)
	}
	reports := filepath.Join(dir, "reports")
	if err := os.Mkdir(reports, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	// Two calls at a time per server, not the runner's eight: a healthy
	// load is the test's premise, and eight at a time on servers built
	// with -race saturate a two-CPU machine for real (the preset read
	// 0.98 of the server's CPU, over its 0.95 threshold, and refused
	// calls that waited for a turn: 5 of 3,640 in one run of four
	// servers at once, 19 with one server at a time).
	run := exec.CommandContext(ctx, runner, "--mode", "server", "--parallel", "2", "--conf", config, "-v", "--", self)
	run.Env = append(os.Environ(), serveEnv+"="+reports)
	var out bytes.Buffer
	run.Stdout, run.Stderr = &out, &out
	err = run.Run()
	m := summary.FindSubmatch(out.Bytes())
	passed := 0
	if m != nil {
		passed, _ = strconv.Atoi(string(m[1]))
	}
	switch {
	case err != nil || m == nil || string(m[2]) != "0":
		// The servers' reports below say whether levee refused.
		t.Errorf("connectconformance --mode server: %v\n%s", err, out.Bytes())
	case passed == 0:
		t.Fatalf("connectconformance ran no case:\n%s", out.Bytes())
	default:
		t.Logf("connectconformance: %s", m[0])
	}

	// Every server the runner started reported, and levee decided on its
	// calls without refusing one.
	files, err := filepath.Glob(filepath.Join(reports, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	// A server per line: the grpc-go reference client gets a server of
	// its own.
	if started := len(serverStart.FindAll(out.Bytes(), -1)); len(files) == 0 || len(files) != started {
		t.Fatalf("%d server reports, want one per server started (%d):\n%s", len(files), started, out.Bytes())
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var r report
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		name := fmt.Sprintf("%s/%s/TLS:%v", r.HTTPVersion, r.Protocol, r.TLS)
		var admitted, refused uint64
		for _, s := range r.Stats {
			admitted, refused = admitted+s.Admitted, refused+s.Refused
			if s.Refused != 0 {
				t.Errorf("%s: guard %s/%s refused %d calls of a healthy suite", name, s.Rule, s.Guard, s.Refused)
			}
		}
		if admitted == 0 {
			t.Errorf("%s: levee's guards admitted no call, want every call decided: %+v", name, r.Stats)
		}
		t.Logf("%s: guards admitted %d times, refused %d times", name, admitted, refused)
	}
}
