package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/levee-go/levee/examples/inventory"
	"github.com/levee-go/levee/internal/report"
)

// gauges holds named live values that the protection policy exposes on
// /stats. The zero value is empty and ready; it is safe for concurrent use.
type gauges struct {
	mu sync.Mutex
	m  map[string]func() float64
}

// Set registers (or replaces) the gauge name, read by calling f at each
// /stats request. f must be safe for concurrent use and must not block.
func (g *gauges) Set(name string, f func() float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = make(map[string]func() float64)
	}
	g.m[name] = f
}

func (g *gauges) read() map[string]float64 {
	g.mu.Lock()
	fs := make(map[string]func() float64, len(g.m))
	for n, f := range g.m {
		fs[n] = f
	}
	g.mu.Unlock()
	if len(fs) == 0 {
		return nil
	}
	out := make(map[string]float64, len(fs))
	for n, f := range fs { // outside the lock: f is the policy's code
		if v := f(); !math.IsNaN(v) && !math.IsInf(v, 0) {
			out[n] = v
		}
	}
	return out
}

// statsSample is the server's state at one instant.
type statsSample struct {
	// Time is the server's clock, unix ns.
	Time int64 `json:"time_ns"`
	// Calls, Late and Canceled are the inventory service's counters:
	// handler runs finished, and those that finished after the caller's
	// deadline or after the caller went away (wasted work).
	Calls    uint64 `json:"calls"`
	Late     uint64 `json:"late"`
	Canceled uint64 `json:"canceled"`
	InFlight int64  `json:"in_flight"`
	// CPUSeconds is the process's CPU time (user+system) so far; -1 when
	// the OS does not report it.
	CPUSeconds float64 `json:"cpu_seconds"`
	// Gauges are the policy's live values ("scale").
	Gauges map[string]float64 `json:"gauges,omitempty"`
}

func (s statsSample) wasted() uint64 { return s.Late + s.Canceled }

// statsDoc is the JSON document served on /stats.
type statsDoc struct {
	// CPUs is GOMAXPROCS: how many CPUs the server may use at once.
	CPUs int `json:"cpus"`
	// Protected tells whether the protection policy is on.
	Protected bool `json:"protected"`
	// Capacity is the capacity the policy was sized from, calls/s.
	Capacity float64 `json:"capacity"`
	// Samples are the recorded samples newer than the request's since
	// parameter, oldest first, and a last one taken for the request.
	Samples []statsSample `json:"samples"`
}

// statsRecorder samples the server's counters every interval from a
// goroutine of its own. It samples inside the server, on a timer, because
// an overloaded server answers HTTP requests late: a timer's goroutine is
// run next by the Go scheduler, while an HTTP request waits behind every
// runnable handler. The parent fetches the recorded series whenever the
// server gets round to answering. Stop must be called to end the goroutine.
type statsRecorder struct {
	srv       *inventory.Server
	g         *gauges
	protected bool
	capacity  float64

	done   chan struct{}
	exited chan struct{}

	mu      sync.Mutex
	samples []statsSample // the last maxSamples, oldest first
}

// maxSamples bounds the recorder's memory: an hour at one a second.
const maxSamples = 3600

func startStatsRecorder(srv *inventory.Server, g *gauges, protected bool, capacity float64, interval time.Duration) *statsRecorder {
	r := &statsRecorder{srv: srv, g: g, protected: protected, capacity: capacity, done: make(chan struct{}), exited: make(chan struct{})}
	r.record()
	go func() {
		defer close(r.exited)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-r.done:
				return
			case <-t.C:
				r.record()
			}
		}
	}()
	return r
}

// Stop ends the sampling goroutine.
func (r *statsRecorder) Stop() {
	close(r.done)
	<-r.exited
}

func (r *statsRecorder) sample() statsSample {
	st := r.srv.Stats()
	return statsSample{
		Time:       time.Now().UnixNano(),
		Calls:      st.Calls,
		Late:       st.Late,
		Canceled:   st.Canceled,
		InFlight:   st.InFlight,
		CPUSeconds: processCPUSeconds(),
		Gauges:     r.g.read(),
	}
}

func (r *statsRecorder) record() {
	s := r.sample()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.samples) == maxSamples {
		r.samples = append(r.samples[:0], r.samples[1:]...)
	}
	r.samples = append(r.samples, s)
}

// ServeHTTP serves the samples newer than the since query parameter (unix
// ns; default 0), plus one taken now.
func (r *statsRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var since int64
	if v := req.URL.Query().Get("since"); v != "" {
		var err error
		if since, err = strconv.ParseInt(v, 10, 64); err != nil {
			http.Error(w, "since must be unix nanoseconds", http.StatusBadRequest)
			return
		}
	}
	doc := statsDoc{CPUs: runtime.GOMAXPROCS(0), Protected: r.protected, Capacity: r.capacity}
	r.mu.Lock()
	for _, s := range r.samples {
		if s.Time > since {
			doc.Samples = append(doc.Samples, s)
		}
	}
	r.mu.Unlock()
	doc.Samples = append(doc.Samples, r.sample())
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(doc)
}

// statsClient reads a server's /stats. Close releases its connections.
type statsClient struct {
	url       string
	transport *http.Transport
	client    *http.Client
}

// newStatsClient returns a client for the /stats of the server whose
// -metrics-addr is addr. Requests time out after timeout: an overloaded
// server may take seconds to answer.
func newStatsClient(addr string, timeout time.Duration) *statsClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}
	return &statsClient{
		url:       "http://" + addr + "/stats",
		transport: tr,
		client:    &http.Client{Transport: tr, Timeout: timeout},
	}
}

// fetch returns the server's samples newer than since.
func (c *statsClient) fetch(ctx context.Context, since time.Time) (statsDoc, error) {
	var doc statsDoc
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"?since="+strconv.FormatInt(since.UnixNano(), 10), nil)
	if err != nil {
		return doc, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return doc, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return doc, fmt.Errorf("GET %s: %s", c.url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return doc, fmt.Errorf("GET %s: %w", c.url, err)
	}
	return doc, nil
}

func (c *statsClient) Close() { c.transport.CloseIdleConnections() }

// serverSamples fetches what the server recorded from shortly before start
// until now, waiting (at most drain) for the handlers still running to
// finish so that work they finish late is counted. The result is what the
// report wants: offsets from start, CPU utilisation over each interval,
// wasted work and the "scale" gauge.
func serverSamples(ctx context.Context, c *statsClient, start time.Time, drain time.Duration) ([]report.ServerSample, error) {
	from := start.Add(-2 * time.Second)
	deadline := time.Now().Add(drain)
	var doc statsDoc
	var err error
	for {
		doc, err = c.fetch(ctx, from)
		if err != nil {
			return nil, err
		}
		n := len(doc.Samples)
		if n == 0 || doc.Samples[n-1].InFlight == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return toReport(doc, start), nil
}

func toReport(doc statsDoc, start time.Time) []report.ServerSample {
	out := make([]report.ServerSample, 0, len(doc.Samples))
	for i, s := range doc.Samples {
		smp := report.ServerSample{
			At:     time.Unix(0, s.Time).Sub(start),
			Calls:  s.Calls,
			Wasted: s.wasted(),
			CPU:    math.NaN(),
			Scale:  math.NaN(),
		}
		if v, ok := s.Gauges["scale"]; ok {
			smp.Scale = v
		}
		if i > 0 {
			prev := doc.Samples[i-1]
			dt := float64(s.Time-prev.Time) / 1e9
			if dt > 0 && s.CPUSeconds >= 0 && prev.CPUSeconds >= 0 && doc.CPUs > 0 {
				smp.CPU = (s.CPUSeconds - prev.CPUSeconds) / dt / float64(doc.CPUs)
			}
		}
		out = append(out, smp)
	}
	return out
}
