package stats

import (
	"encoding/json"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/levee-go/levee/examples/inventory"
)

// Gauges holds named live values that the protection policy exposes on
// /stats. The zero value is empty and ready; it is safe for concurrent use.
type Gauges struct {
	mu sync.Mutex
	m  map[string]func() float64
}

// Set registers (or replaces) the gauge name, read by calling f at each
// /stats request. f must be safe for concurrent use and must not block.
func (g *Gauges) Set(name string, f func() float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = make(map[string]func() float64)
	}
	g.m[name] = f
}

func (g *Gauges) read() map[string]float64 {
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

// Recorder samples the server's counters every interval from a goroutine
// of its own, and serves them on /stats (it is an http.Handler). It
// samples inside the server, on a timer, because an overloaded server
// answers HTTP requests late: a timer's goroutine is run next by the Go
// scheduler, while an HTTP request waits behind every runnable handler.
// The parent fetches the recorded series whenever the server gets round to
// answering. Create it with StartRecorder; Stop must be called to end the
// goroutine. It is safe for concurrent use.
type Recorder struct {
	srv       *inventory.Server
	g         *Gauges
	protected bool
	capacity  float64

	done   chan struct{}
	exited chan struct{}

	mu      sync.Mutex
	samples []Sample // the last maxSamples, oldest first
}

// maxSamples bounds the recorder's memory: an hour at one a second.
const maxSamples = 3600

// StartRecorder starts sampling srv's counters and g's gauges (g may be
// nil: no gauges) every interval. protected and capacity are reported as
// they are in every document.
func StartRecorder(srv *inventory.Server, g *Gauges, protected bool, capacity float64, interval time.Duration) *Recorder {
	if g == nil {
		g = &Gauges{}
	}
	r := &Recorder{srv: srv, g: g, protected: protected, capacity: capacity, done: make(chan struct{}), exited: make(chan struct{})}
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
func (r *Recorder) Stop() {
	close(r.done)
	<-r.exited
}

func (r *Recorder) sample() Sample {
	st := r.srv.Stats()
	return Sample{
		Time:       time.Now().UnixNano(),
		Calls:      st.Calls,
		Late:       st.Late,
		Canceled:   st.Canceled,
		InFlight:   st.InFlight,
		CPUSeconds: processCPUSeconds(),
		Gauges:     r.g.read(),
		Memory:     readMemory(),
	}
}

func (r *Recorder) record() {
	s := r.sample()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.samples) == maxSamples {
		r.samples = append(r.samples[:0], r.samples[1:]...)
	}
	r.samples = append(r.samples, s)
}

// ServeHTTP serves a [Doc] with the samples newer than the since query
// parameter (unix ns; default 0), plus one taken now.
func (r *Recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var since int64
	if v := req.URL.Query().Get("since"); v != "" {
		var err error
		if since, err = strconv.ParseInt(v, 10, 64); err != nil {
			http.Error(w, "since must be unix nanoseconds", http.StatusBadRequest)
			return
		}
	}
	doc := Doc{CPUs: runtime.GOMAXPROCS(0), Protected: r.protected, Capacity: r.capacity}
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
