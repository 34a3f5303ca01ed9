package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/decide"
	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
	"github.com/levee-go/levee/statuspage"
)

// overloadServe sends a burst of concurrent Allocate calls to the
// `levee serve` at grpcAddr, whose -capacity is far below it, and
// returns how many were refused and the reasons their ErrorInfo gave.
func overloadServe(t *testing.T, grpcAddr string) (refused int, reasons map[string]int) {
	t.Helper()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := inventoryv1.NewInventoryServiceClient(conn)
	reasons = map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := client.Allocate(ctx, &inventoryv1.AllocateRequest{Sku: "SKU-0001", Quantity: 1, OrderId: fmt.Sprintf("status-%d", i)})
			if err == nil {
				return
			}
			st := status.Convert(err)
			mu.Lock()
			defer mu.Unlock()
			if st.Code() != codes.ResourceExhausted {
				t.Errorf("Allocate %d: %v, want OK or RESOURCE_EXHAUSTED", i, err)
				return
			}
			refused++
			for _, d := range st.Details() {
				if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == decide.ErrorDomain {
					reasons[ei.GetReason()]++
				}
			}
		})
	}
	wg.Wait()
	return refused, reasons
}

// TestServeDebugPageAndStatus: `levee serve` with a capacity far below a
// burst of calls refuses some; its /debug/levee names the reason and the
// evidence of the refusals it shows, counts every one the client saw, and
// shows the run limit's flow of Allocate; `levee status` prints it, as
// text and as JSON.
func TestServeDebugPageAndStatus(t *testing.T) {
	grpcAddr, httpAddr, _ := startServe(t, "-capacity", "5")
	refused, reasons := overloadServe(t, grpcAddr)
	if refused == 0 || reasons[string(decide.ReasonRateLimited)] != refused {
		t.Fatalf("%d of 60 calls refused, ErrorInfo reasons %v; want some, each RATE_LIMITED in domain levee", refused, reasons)
	}

	resp, err := http.Get("http://" + httpAddr + debugPath + "?format=json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var st statuspage.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%s?format=json: %v\n%s", debugPath, err, body)
	}
	if len(st.Refusals) == 0 {
		t.Fatalf("debug page shows no refusal after %d:\n%s", refused, body)
	}
	for _, r := range st.Refusals {
		if r.Reason != string(decide.ReasonRateLimited) || r.Evidence != "limit" || r.Guard != "rate" ||
			r.Method != "/corecart.inventory.v1.InventoryService/Allocate" || r.Code != "RESOURCE_EXHAUSTED" {
			t.Errorf("debug page refusal %+v, want RATE_LIMITED by rate on limit, of Allocate", r)
		}
	}
	var counted uint64
	for _, c := range st.RefusalCounts {
		counted += c.Count
	}
	if counted != uint64(refused) {
		t.Errorf("debug page counts %d refusals (%+v), the client saw %d", counted, st.RefusalCounts, refused)
	}
	var allocate bool
	for _, rl := range st.RunLimits {
		for _, f := range rl.Flows {
			allocate = allocate || f.Name == "/corecart.inventory.v1.InventoryService/Allocate" && f.ServiceTimeMS > 0
		}
	}
	if !allocate || len(st.Signals) == 0 {
		t.Errorf("debug page: run limits %+v, %d signals; want Allocate's flow with its service time, and signals", st.RunLimits, len(st.Signals))
	}

	c, out, errOut := testCLI(t)
	if code := c.run(context.Background(), []string{"status", httpAddr}); code != exitOK {
		t.Fatalf("levee status %s: exit %d: %s", httpAddr, code, errOut)
	}
	for _, want := range []string{"levee status at", "run limit run:", "signals of overload:", "RATE_LIMITED", "/corecart.inventory.v1.InventoryService/Allocate"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("levee status printed no %q:\n%s", want, out)
		}
	}
	c, out, errOut = testCLI(t)
	if code := c.run(context.Background(), []string{"status", "-json", "http://" + httpAddr}); code != exitOK {
		t.Fatalf("levee status -json: exit %d: %s", code, errOut)
	}
	var again statuspage.Status
	if err := json.Unmarshal([]byte(out.String()), &again); err != nil || len(again.Refusals) == 0 {
		t.Errorf("levee status -json: %v, %d refusals:\n%s", err, len(again.Refusals), out)
	}
}

// TestDebugPageOfEveryRecipe: the static recipe and a policy file serve
// the debug page too, over their own engines.
func TestDebugPageOfEveryRecipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - name: all\n    guards: [{type: ratelimit, rate: 1000/s}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-recipe", "static", "-capacity", "100"}, {"-policy", path}} {
		_, httpAddr, _ := startServe(t, args...)
		resp, err := http.Get("http://" + httpAddr + debugPath)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "signals of overload:") {
			t.Errorf("serve %q: %s: %s\n%s", args, debugPath, resp.Status, body)
		}
	}
}

func TestStatusBadInput(t *testing.T) {
	tests := []struct {
		name     string
		give     []string
		wantCode int
		want     string
	}{
		{"no address", []string{"status"}, exitUsage, "want the address of the server's debug page"},
		{"two addresses", []string{"status", "a:1", "b:2"}, exitUsage, `unexpected argument "b:2"`},
		{"bad scheme", []string{"status", "ftp://a:1"}, exitUsage, "want host:port or an http(s) URL"},
		{"bad timeout", []string{"status", "-timeout", "0s", "a:1"}, exitUsage, "-timeout must be > 0"},
		{"nothing there", []string{"status", "-timeout", "2s", "127.0.0.1:1"}, exitFail, "reading http://127.0.0.1:1/debug/levee"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, errOut := testCLI(t)
			if code := c.run(context.Background(), tt.give); code != tt.wantCode || !strings.Contains(errOut.String(), tt.want) {
				t.Errorf("levee %s: exit %d, stderr %q; want %d and %q", strings.Join(tt.give, " "), code, errOut, tt.wantCode, tt.want)
			}
		})
	}
	c, out, errOut := testCLI(t)
	if code := c.run(context.Background(), []string{"status", "-h"}); code != exitOK || !strings.Contains(out.String(), "Usage: levee status") {
		t.Errorf("levee status -h: exit %d, stdout %q, stderr %q; want 0 and the usage", code, out, errOut)
	}
	if u, err := pageURL("127.0.0.1:9090", true); err != nil || u != "http://127.0.0.1:9090/debug/levee?format=json" {
		t.Errorf("pageURL(host:port, json) = %q, %v", u, err)
	}
	if u, err := pageURL("https://ops.example/levee", false); err != nil || u != "https://ops.example/levee" {
		t.Errorf("pageURL(a URL with a path) = %q, %v", u, err)
	}
}
