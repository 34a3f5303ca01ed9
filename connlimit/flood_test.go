package connlimit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The flood runs in a child process (this test binary re-executed), so
// that the file descriptors and goroutines counted in the parent are the
// server's alone.
const floodEnv = "LEVEE_CONNLIMIT_FLOOD"

// floodResult is what the flooding child prints: how each of its
// connections ended, and how long it took to find out.
type floodResult struct {
	Conns    int
	Served   int    // read the server's first bytes (its HTTP/2 settings)
	Reset    int    // reset or closed by the server before any byte
	Waiting  int    // no answer within the read deadline (held in the accept queue)
	DialFail int    // connect itself failed or timed out
	DialErr  string // one of the dial errors
	// Median and 90th percentile time from dial to the end above, for
	// the connections reset and for those served.
	ResetP50, ResetP90, ServedP50 time.Duration
}

// runFlood is the child: LEVEE_CONNLIMIT_FLOOD=addr, _N connections,
// _PAR at once, each served one kept open for _HOLD.
func runFlood() int {
	var addr string
	var n, par int
	if _, err := fmt.Sscanf(os.Getenv(floodEnv), "%s", &addr); err != nil {
		fmt.Println("bad", floodEnv, err)
		return 2
	}
	n, _ = strconv.Atoi(os.Getenv(floodEnv + "_N"))
	par, _ = strconv.Atoi(os.Getenv(floodEnv + "_PAR"))
	hold, _ := time.ParseDuration(os.Getenv(floodEnv + "_HOLD"))
	var (
		mu            sync.Mutex
		res           = floodResult{Conns: n}
		resets, serve []time.Duration
		wg            sync.WaitGroup
		sem           = make(chan struct{}, par)
	)
	for range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			start := time.Now()
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if errors.Is(err, syscall.ECONNRESET) {
				// The reset can arrive before connect returns.
				mu.Lock()
				res.Reset++
				resets = append(resets, time.Since(start))
				mu.Unlock()
				return
			}
			if err != nil {
				mu.Lock()
				res.DialFail++
				res.DialErr = err.Error()
				mu.Unlock()
				return
			}
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			var b [1]byte
			_, err = c.Read(b[:])
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			var ne net.Error
			switch {
			case err == nil:
				res.Served++
				serve = append(serve, d)
				// Stay connected a while, as clients do.
				time.AfterFunc(hold, func() { c.Close() })
				mu.Unlock()
				time.Sleep(hold)
				mu.Lock()
			case errors.As(err, &ne) && ne.Timeout():
				res.Waiting++
			default: // ECONNRESET or EOF
				res.Reset++
				resets = append(resets, d)
			}
		}()
	}
	wg.Wait()
	res.ResetP50, res.ResetP90 = pct(resets, 50), pct(resets, 90)
	res.ServedP50 = pct(serve, 50)
	json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[(len(d)-1)*p/100]
}

// countFDs is the number of open file descriptors of this process.
func countFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// TestFloodBounded floods a capped grpc-go server over loopback with
// connections from another process, in each mode, while four admitted
// clients keep calling it. The server's goroutines and file descriptors
// stay within bounds set by the cap, every call of the admitted clients
// succeeds, and the numbers are logged (run with -v).
func TestFloodBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("connection flood in -short mode")
	}
	const (
		maxConns = 16
		clients  = 4
		par      = 200
	)
	for _, tt := range []struct {
		mode  Mode
		flood int // connections; a held one waits up to 500 ms, so fewer
	}{{Refuse, 3000}, {Hold, 1000}} {
		mode, flood := tt.mode, tt.flood
		t.Run(mode.String(), func(t *testing.T) {
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			lis, err := NewListener(inner, WithMaxConns(maxConns), WithMode(mode))
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			healthpb.RegisterHealthServer(srv, health.NewServer())
			served := make(chan error, 1)
			go func() { served <- srv.Serve(lis) }()
			defer func() {
				srv.Stop()
				<-served
			}()

			// The admitted clients: connected and called once before the
			// flood, then calling in a loop during it.
			var calls, failed atomic.Int64
			var firstErr atomic.Value
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range clients {
				cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer cc.Close()
				hc := healthpb.NewHealthClient(cc)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
				cancel()
				if err != nil {
					t.Fatalf("admitted client before the flood: %v", err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
						cancel()
						calls.Add(1)
						if err != nil {
							failed.Add(1)
							firstErr.CompareAndSwap(nil, err)
						}
						time.Sleep(2 * time.Millisecond)
					}
				}()
			}
			time.Sleep(50 * time.Millisecond) // let the clients settle
			baseG, baseFD := runtime.NumGoroutine(), countFDs(t)

			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			child := exec.Command(exe, "-test.run=^$")
			child.Env = append(os.Environ(), floodEnv+"="+lis.Addr().String(),
				floodEnv+"_N="+strconv.Itoa(flood), floodEnv+"_PAR="+strconv.Itoa(par), floodEnv+"_HOLD=300ms")
			out, err := child.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			var peakG, peakFD int
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				tick := time.NewTicker(2 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						peakG = max(peakG, runtime.NumGoroutine())
						peakFD = max(peakFD, countFDs(t))
					}
				}
			}()
			line, _ := bufio.NewReader(out).ReadBytes('\n')
			io.Copy(io.Discard, out)
			if err := child.Wait(); err != nil {
				t.Fatalf("flood child: %v (%s)", err, line)
			}
			close(stop)
			wg.Wait()
			<-sampled
			var res floodResult
			if err := json.Unmarshal(line, &res); err != nil {
				t.Fatalf("flood child printed %q: %v", line, err)
			}
			st := lis.Stats()
			t.Logf("%s: flood %+v", mode, res)
			t.Logf("%s: server goroutines %d → peak %d (+%d), fds %d → peak %d (+%d); listener %+v; admitted calls %d, failed %d",
				mode, baseG, peakG, peakG-baseG, baseFD, peakFD, peakFD-baseFD, st, calls.Load(), failed.Load())

			if n := failed.Load(); n != 0 {
				t.Errorf("%d of %d calls of admitted clients failed during the flood; first: %v", n, calls.Load(), firstErr.Load())
			}
			if st.Peak > maxConns {
				t.Errorf("Stats().Peak = %d, want <= %d", st.Peak, maxConns)
			}
			// A grpc-go server connection costs a few goroutines (reader,
			// writer, keepalive, the handshake) and one descriptor; the
			// room left under the cap is maxConns-clients connections.
			// Goroutines of a closed connection take a moment to exit
			// while the next is accepted, hence the slack; what matters
			// is that the bound does not grow with the flood.
			room := maxConns - clients
			if d := peakG - baseG; d > 8*room+10 {
				t.Errorf("goroutines rose by %d during the flood, want <= %d", d, 8*room+10)
			}
			if d := peakFD - baseFD; d > room+8 {
				t.Errorf("file descriptors rose by %d during the flood, want <= %d", d, room+8)
			}
			if mode == Refuse && res.Reset == 0 {
				t.Errorf("flood %+v: no connection was refused", res)
			}
		})
	}
}
