package main

import (
	"context"
	"go/build"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/decide"
)

// grpcurlVersion is the grpcurl .ci/run installs.
const grpcurlVersion = "v1.9.4"

// grpcurl returns the path of the grpcurl binary: on PATH, or in
// GOPATH/bin where go install puts it. It fails the test without one,
// saying how to install it (.ci/run does).
func grpcurl(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("grpcurl"); err == nil {
		return p
	}
	p := filepath.Join(build.Default.GOPATH, "bin", "grpcurl")
	if _, err := exec.LookPath(p); err == nil {
		return p
	}
	t.Fatalf("grpcurl is not installed: go install github.com/fullstorydev/grpcurl/cmd/grpcurl@%s (.ci/run does)", grpcurlVersion)
	return ""
}

// TestGrpcurlReadsErrorInfo: a call `levee serve` refuses, read by
// grpcurl (an outside client, through the server's reflection), prints
// the google.rpc.ErrorInfo detail with the domain levee and one of the
// documented reasons, and the RetryInfo beside it.
func TestGrpcurlReadsErrorInfo(t *testing.T) {
	bin := grpcurl(t)
	grpcAddr, _, _ := startServe(t, "-capacity", "0.01") // one call, then none for 100s
	var out string
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		b, err := exec.CommandContext(ctx, bin, "-plaintext", "-max-time", "20",
			"-d", `{"sku":"SKU-0001","quantity":1,"order_id":"grpcurl-`+string(rune('a'+i))+`"}`,
			grpcAddr, "corecart.inventory.v1.InventoryService/Allocate").CombinedOutput()
		cancel()
		out = string(b)
		if err != nil {
			break // grpcurl exits non-zero on an error status
		}
	}
	if !strings.Contains(out, "Code: ResourceExhausted") {
		t.Fatalf("grpcurl never printed a refusal in 3 calls against -capacity 0.01:\n%s", out)
	}
	if !strings.Contains(out, `"@type": "type.googleapis.com/google.rpc.ErrorInfo"`) || !strings.Contains(out, `"domain": "levee"`) {
		t.Fatalf("grpcurl printed no ErrorInfo of domain levee:\n%s", out)
	}
	m := regexp.MustCompile(`"reason": "([A-Z_]+)"`).FindStringSubmatch(out)
	if m == nil || !slices.Contains(decide.Reasons, decide.Reason(m[1])) || m[1] != string(decide.ReasonRateLimited) {
		t.Fatalf("grpcurl printed reason %v, want RATE_LIMITED, one of decide.Reasons:\n%s", m, out)
	}
	if !strings.Contains(out, "google.rpc.RetryInfo") || !strings.Contains(out, `"guard": "rate"`) || !strings.Contains(out, `"evidence": "limit"`) {
		t.Errorf("grpcurl printed no RetryInfo, or no guard and evidence in the ErrorInfo:\n%s", out)
	}
}
