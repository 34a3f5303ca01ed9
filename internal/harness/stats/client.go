package stats

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/levee-go/levee/internal/harness/report"
)

// Reading a server's stats after a run: the server may still be busy with
// the calls it accepted, so wait up to DefaultDrain for its handlers to
// finish and up to DefaultTimeout in all.
const (
	DefaultDrain   = 5 * time.Second
	DefaultTimeout = 20 * time.Second
)

// Client reads a server's /stats. Create it with NewClient; Close
// releases its connections. It is safe for concurrent use.
type Client struct {
	url       string
	transport *http.Transport
	client    *http.Client
}

// NewClient returns a client for the /stats of the server whose
// -metrics-addr is addr. Requests time out after timeout: an overloaded
// server may take seconds to answer.
func NewClient(addr string, timeout time.Duration) *Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}
	return &Client{
		url:       "http://" + addr + "/stats",
		transport: tr,
		client:    &http.Client{Transport: tr, Timeout: timeout},
	}
}

// Fetch returns the server's samples newer than since.
func (c *Client) Fetch(ctx context.Context, since time.Time) (Doc, error) {
	var doc Doc
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

// Close releases the client's idle connections.
func (c *Client) Close() { c.transport.CloseIdleConnections() }

// ServerSamples fetches what the server recorded from shortly before start
// until now, waiting (at most drain) for the handlers still running to
// finish so that work they finish late is counted. The result is what the
// report wants: offsets from start, CPU utilisation over each interval,
// wasted work and the "scale" gauge.
func (c *Client) ServerSamples(ctx context.Context, start time.Time, drain time.Duration) ([]report.ServerSample, error) {
	from := start.Add(-2 * time.Second)
	deadline := time.Now().Add(drain)
	var doc Doc
	var err error
	for {
		doc, err = c.Fetch(ctx, from)
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

func toReport(doc Doc, start time.Time) []report.ServerSample {
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

// ToReport turns doc's samples into the report's server samples, with
// offsets from start.
func ToReport(doc Doc, start time.Time) []report.ServerSample { return toReport(doc, start) }

// Watcher polls a server's /stats while a run goes on and keeps every
// sample it got, so that a server that dies during the run (killed by the
// OOM killer, say) still leaves the samples it served. Create it with
// Watch; Stop ends it.
type Watcher struct {
	c      *Client
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	doc  Doc
	last int64 // Time of the newest sample kept
}

// Watch starts polling c every interval for the samples newer than from.
func (c *Client) Watch(from time.Time, every time.Duration) *Watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{c: c, cancel: cancel, done: make(chan struct{}), last: from.UnixNano()}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			w.poll(ctx, every)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *Watcher) poll(ctx context.Context, timeout time.Duration) {
	w.mu.Lock()
	since := w.last
	w.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, max(timeout, time.Second))
	defer cancel()
	doc, err := w.c.Fetch(pctx, time.Unix(0, since))
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.doc.CPUs, w.doc.Protected, w.doc.Capacity = doc.CPUs, doc.Protected, doc.Capacity
	for _, s := range doc.Samples {
		if s.Time > w.last {
			w.doc.Samples = append(w.doc.Samples, s)
			w.last = s.Time
		}
	}
}

// Stop ends the polling, after one last poll if the server still answers
// within timeout, and returns every sample kept.
func (w *Watcher) Stop(timeout time.Duration) Doc {
	w.cancel()
	<-w.done
	w.poll(context.Background(), timeout)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.doc
}
