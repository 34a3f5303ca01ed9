package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/internal/harness/report"
	"github.com/levee-go/levee/internal/harness/stats"
	"github.com/levee-go/levee/internal/harness/target"
)

// loadFlags are the load-shaping flags shared by `levee load` and `levee
// demo`.
type loadFlags struct {
	deadline    time.Duration
	arrivals    string
	retries     int
	retryOn     string
	maxInFlight int
	conns       int
	quiet       bool
}

func (f *loadFlags) register(fs interface {
	DurationVar(*time.Duration, string, time.Duration, string)
	StringVar(*string, string, string, string)
	IntVar(*int, string, int, string)
	BoolVar(*bool, string, bool, string)
}, defaultArrivals string) {
	fs.DurationVar(&f.deadline, "deadline", time.Second, "deadline of each attempt")
	fs.StringVar(&f.arrivals, "arrivals", defaultArrivals, "request spacing: constant or poisson")
	fs.IntVar(&f.retries, "retries", 0, "client retries per request (0: none); they honour the server's pushback")
	fs.StringVar(&f.retryOn, "retry-on", "RESOURCE_EXHAUSTED,UNAVAILABLE", "comma-separated status `codes` that are retried")
	fs.IntVar(&f.maxInFlight, "max-in-flight", 10000, "generator safety cap on requests in flight; requests over it are counted as dropped")
	fs.IntVar(&f.conns, "conns", 1, "gRPC connections to spread the load over")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress line on stderr")
}

// options validates the flags and returns the generator options.
func (f *loadFlags) options(progress io.Writer) ([]loadgen.Option, error) {
	if err := positive("deadline", f.deadline); err != nil {
		return nil, err
	}
	arr, err := loadgen.ParseArrivals(f.arrivals)
	if err != nil {
		return nil, usageError("-arrivals: must be constant or poisson, got %q", f.arrivals)
	}
	if f.retries < 0 {
		return nil, usageError("-retries must be >= 0, got %d", f.retries)
	}
	if f.maxInFlight < 1 {
		return nil, usageError("-max-in-flight must be >= 1, got %d", f.maxInFlight)
	}
	if f.conns < 1 || f.conns > 64 {
		return nil, usageError("-conns must be in 1..64, got %d", f.conns)
	}
	var retryCodes []codes.Code
	for _, name := range strings.Split(f.retryOn, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		c, err := loadgen.ParseCode(name)
		if err != nil {
			return nil, usageError("-retry-on: unknown status code %q", name)
		}
		retryCodes = append(retryCodes, c)
	}
	if f.retries > 0 && len(retryCodes) == 0 { // the generator would retry its default codes
		return nil, usageError("-retry-on names no status code, with -retries %d", f.retries)
	}
	opts := []loadgen.Option{
		loadgen.WithDeadline(f.deadline),
		loadgen.WithArrivals(arr),
		loadgen.WithMaxInFlight(f.maxInFlight),
	}
	if f.retries > 0 {
		opts = append(opts, loadgen.WithRetry(loadgen.RetryPolicy{MaxAttempts: f.retries + 1, Codes: retryCodes}))
	}
	if !f.quiet && progress != nil {
		opts = append(opts, loadgen.WithProgress(progress))
	}
	return opts, nil
}

// sameFile reports whether two output flags name one file (not "-",
// stdout): the second written would replace the first.
func sameFile(a, b string) bool {
	return a != "" && a != "-" && b != "" && b != "-" && filepath.Clean(a) == filepath.Clean(b)
}

// outputFlag is an output flag of a command and the file it names.
type outputFlag struct{ flag, path string }

// checkOutputs returns a usage error naming the first flag whose file
// cannot be written (see checkWritable), nil if every one can. Commands
// call it before their run, whose result would be lost.
func checkOutputs(outs ...outputFlag) error {
	for _, o := range outs {
		if err := checkWritable(o.path); err != nil {
			return usageError("-%s %s: %v", o.flag, o.path, err)
		}
	}
	return nil
}

// checkWritable returns why the file path cannot be written, nil if it
// can or path is "" (no file) or "-" (stdout). It opens the file for
// writing without truncating it, and removes it again if it made it.
func checkWritable(path string) error {
	if path == "" || path == "-" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	made := err == nil
	if errors.Is(err, fs.ErrExist) {
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return pe.Err // the flag's message names the path
		}
		return err
	}
	err = f.Close()
	if made {
		err = errors.Join(err, os.Remove(path))
	}
	return err
}

// maxSchedule bounds the schedule of a run (see scenario.MaxSchedule).
const maxSchedule = scenario.MaxSchedule

// parsePhases parses "name:duration:rate,..." (e.g.
// "normal:10s:100,spike:10s:2000").
func parsePhases(s string) ([]loadgen.Phase, error) {
	var phases []loadgen.Phase
	for i, part := range strings.Split(s, ",") {
		fields := strings.Split(strings.TrimSpace(part), ":")
		if len(fields) != 3 || fields[0] == "" {
			return nil, usageError("-phases: phase %d %q: want name:duration:rate, e.g. spike:10s:2000", i+1, part)
		}
		d, err := time.ParseDuration(fields[1])
		if err != nil {
			return nil, usageError("-phases: phase %q: bad duration %q", fields[0], fields[1])
		}
		if d <= 0 {
			return nil, usageError("-phases: phase %q: duration must be > 0, got %v", fields[0], d)
		}
		rate, err := strconv.ParseFloat(fields[2], 64)
		if err != nil || !(rate >= 0 && rate <= 1e7) {
			return nil, usageError("-phases: phase %q: rate must be a number of calls/s in 0..1e7, got %q", fields[0], fields[2])
		}
		phases = append(phases, loadgen.Phase{Name: fields[0], Duration: d, Rate: rate})
	}
	var total time.Duration
	hours := 0.0 // the sum, which may not fit a Duration
	for _, p := range phases {
		hours += p.Duration.Hours()
		if p.Duration <= maxSchedule && total <= maxSchedule {
			total += p.Duration
		}
	}
	if hours > maxSchedule.Hours() || total > maxSchedule {
		return nil, usageError("-phases: the schedule must be at most %v, got %gh", maxSchedule, hours)
	}
	return phases, nil
}

func (c *cli) load(ctx context.Context, args []string) error {
	fs := c.newFlagSet("load", "Drive open-loop Allocate load against a running inventory server and report\ngoodput, refusals, timeouts and latency percentiles per phase.")
	addr := fs.String("target", "127.0.0.1:50051", "gRPC `address` of the server")
	rate := fs.Float64("rate", 100, "calls/s (ignored with -phases)")
	duration := fs.Duration("duration", 10*time.Second, "how long to run (ignored with -phases)")
	phasesFlag := fs.String("phases", "", "schedule as `name:duration:rate,...` (e.g. normal:10s:100,spike:10s:2000)")
	jsonOut := fs.String("json", "", "write the full result as JSON to this `file` (-: to stdout, and the table to stderr)")
	htmlOut := fs.String("html", "", "write an HTML report to this `file` (-: to stdout, and the table to stderr)")
	statsAddr := fs.String("stats", "", "HTTP `address` of the server's /stats (its -metrics-addr), to report wasted work and CPU")
	capacity := fs.Float64("capacity", 0, "server capacity in calls/s, to show goodput as a share of it (0: unknown)")
	tenant := fs.String("tenant", "", "send this tenant `id` with every call, in the -tenant-header (mixes: run one levee load per tenant)")
	tenantHeader := fs.String("tenant-header", "x-tenant-id", "metadata `key` that carries -tenant")
	crit := fs.String("criticality", "", "send this `class` in levee-criticality with every call: critical_plus, critical, sheddable_plus or sheddable (mixes: run one levee load per class)")
	var lf loadFlags
	lf.register(fs, "constant")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	var phases []loadgen.Phase
	if *phasesFlag != "" {
		var err error
		if phases, err = parsePhases(*phasesFlag); err != nil {
			return err
		}
	} else {
		if err := positive("duration", *duration); err != nil {
			return err
		}
		if *duration > maxSchedule {
			return usageError("-duration must be at most %v, got %v", maxSchedule, *duration)
		}
		if !(*rate >= 0 && *rate <= 1e7) {
			return usageError("-rate must be in 0..1e7 calls/s, got %v", *rate)
		}
		phases = []loadgen.Phase{{Name: "load", Duration: *duration, Rate: *rate}}
	}
	if sameFile(*jsonOut, *htmlOut) {
		return usageError("-json and -html name the same file %q", *htmlOut)
	}
	if *jsonOut == "-" && *htmlOut == "-" {
		return usageError("-json - and -html - both write to stdout: name a file for one of them")
	}
	if !(*capacity >= 0 && *capacity <= 1e9) { // NaN and Inf too
		return usageError("-capacity must be in 0..1e9 calls/s (0: unknown), got %v", *capacity)
	}
	var md []string
	if *tenant != "" {
		key := strings.ToLower(*tenantHeader)
		if key == "" {
			return usageError("-tenant-header must not be empty with -tenant")
		}
		// What grpc-go accepts in metadata: it fails every call otherwise.
		if strings.Trim(key, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" {
			return usageError("-tenant-header: %q is not a gRPC metadata key: want letters, digits, '-', '_' or '.'", *tenantHeader)
		}
		if strings.IndexFunc(*tenant, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
			return usageError("-tenant: must be printable ASCII (gRPC metadata), got %q", *tenant)
		}
		md = append(md, key, *tenant)
	}
	if *crit != "" {
		class, ok := admission.ParseCriticality(*crit)
		if !ok {
			return usageError("-criticality: want critical_plus, critical, sheddable_plus or sheddable, got %q", *crit)
		}
		md = append(md, decide.CriticalityHeader, class.String())
	}
	opts, err := lf.options(c.stderr)
	if err != nil {
		return err
	}
	// The result is written after the run: a path it cannot be written to
	// is found out now.
	if err := checkOutputs(outputFlag{"json", *jsonOut}, outputFlag{"html", *htmlOut}); err != nil {
		return err
	}

	ctx, stop := signalContext(ctx)
	defer stop()
	t, err := target.Dial(ctx, *addr, lf.conns, c.readyTimeout)
	if err != nil {
		return err
	}
	defer t.Close()
	if len(md) > 0 {
		t.SetMetadata(md...)
	}
	var sc *stats.Client
	if *statsAddr != "" {
		sc = stats.NewClient(*statsAddr, stats.DefaultTimeout)
		defer sc.Close()
		if _, err := sc.Fetch(ctx, time.Now()); err != nil {
			return fmt.Errorf("-stats %s: %w", *statsAddr, err)
		}
	}

	run, runErr := t.Run(ctx, sc, stats.DefaultDrain, phases, opts)
	if run.Result == nil {
		return runErr
	}
	run.Name = *addr
	cmp := &report.Comparison{Title: "levee load " + *addr, Capacity: *capacity, Runs: []report.Run{run}}
	tables := c.stdout
	if *jsonOut == "-" || *htmlOut == "-" { // stdout carries the JSON or the report alone
		tables = c.stderr
	}
	if err := report.WriteTable(tables, cmp); err != nil {
		return err
	}
	if *jsonOut != "" {
		if err := report.WriteJSONFile(*jsonOut, c.stdout, run.Result); err != nil {
			return err
		}
	}
	switch *htmlOut {
	case "":
	case "-":
		if err := report.WriteHTML(c.stdout, cmp); err != nil {
			return fmt.Errorf("writing HTML report: %w", err)
		}
	default:
		if err := report.WriteHTMLFile(*htmlOut, cmp); err != nil {
			return err
		}
		fmt.Fprintf(c.stderr, "wrote %s\n", *htmlOut)
	}
	if ctx.Err() != nil { // even once the schedule had ended: its last calls were cut short
		return fmt.Errorf("interrupted; the report covers the part that ran")
	}
	return runErr
}
