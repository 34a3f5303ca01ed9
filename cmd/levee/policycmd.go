package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/levee-go/levee/metrics"
	policyfile "github.com/levee-go/levee/policy"
)

// errReported marks a failure whose message the command has already
// written (a policy file's errors, one a line): run exits 1 without
// another line.
var errReported = errors.New("reported")

const policyUsage = `Usage:
  levee policy check FILE|-     validate a policy file (- reads stdin); exit 0 if valid,
                                else 1 with every error as file:line:column: field: message
  levee policy print [FILE|-]   the effective policy with every default filled in, in a
                                fixed order, for diff (no FILE: levee serve's default)
  levee policy example          a commented example policy that passes check
`

// policy runs `levee policy check|print|example`.
func (c *cli) policy(args []string) error {
	if len(args) == 0 {
		return usageError("want check, print or example (see levee policy -h)")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(c.stdout, policyUsage)
		return nil
	case "example":
		if len(rest) > 0 {
			return usageError("example takes no argument, got %q", rest[0])
		}
		_, err := c.stdout.Write(policyfile.Example)
		return err
	case "check", "print":
	default:
		return usageError("unknown subcommand %q: want check, print or example", sub)
	}
	if len(rest) > 1 {
		return usageError("%s takes one FILE (or - for stdin), got %d arguments", sub, len(rest))
	}
	if len(rest) == 1 && (rest[0] == "-h" || rest[0] == "-help" || rest[0] == "--help") {
		fmt.Fprint(c.stdout, policyUsage)
		return nil
	}
	if sub == "check" && len(rest) == 0 {
		return usageError("check needs a FILE (or - for stdin)")
	}
	var p *policyfile.Policy
	if len(rest) == 0 {
		p = policyfile.DefaultPolicy()
	} else {
		name, data, err := c.readPolicy(rest[0])
		if err != nil {
			return err
		}
		if p, err = policyfile.Decode(name, data); err != nil {
			fmt.Fprintln(c.stderr, err)
			return errReported
		}
	}
	if sub == "check" {
		fmt.Fprintf(c.stdout, "%s: ok, policy %s\n", displayName(rest[0]), policyfile.HashString(p.Hash()))
		return nil
	}
	_, err := c.stdout.Write(p.Format())
	return err
}

func displayName(arg string) string {
	if arg == "-" {
		return "<stdin>"
	}
	return arg
}

// readPolicy reads a policy file, or stdin for "-": at most one byte
// more than a policy may have, for Decode to refuse a larger one.
func (c *cli) readPolicy(arg string) (name string, data []byte, err error) {
	if arg != "-" {
		data, err = policyfile.ReadFile(arg)
		return arg, data, err
	}
	in := c.stdin
	if in == nil {
		in = os.Stdin
	}
	data, err = io.ReadAll(io.LimitReader(in, policyfile.MaxFileSize+1))
	return "<stdin>", data, err
}

// fileProtection runs the policy file at path for `levee serve -policy`:
// reloaded when the file changes and on SIGHUP, its reloads and hash
// exported on /metrics beside its decisions.
func (c *cli) fileProtection(path string, p policyParams) (protection, error) {
	// The Reloader runs the CPU signal as protect.New does.
	r, err := policyfile.NewReloader(path, policyfile.WithLogf(log.New(c.stderr, "", log.LstdFlags).Printf))
	if err != nil {
		return protection{}, err
	}
	if err := r.Watch(); err != nil {
		r.Close()
		return protection{}, err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	hupDone := make(chan struct{})
	go func() {
		defer close(hupDone)
		for range hup {
			_ = r.Reload() // the Reloader logs the outcome
		}
	}()
	stop := func() {
		signal.Stop(hup)
		close(hup)
		<-hupDone
		r.Close()
	}
	if p.Mux != nil {
		reg := metrics.New(metrics.WithRuntimeMetrics())
		errs := []error{reg.AddServer(r), reg.AddPolicy(r)}
		if mon := r.CPU(); mon != nil {
			errs = append(errs, reg.AddCPU(mon))
		}
		if err := errors.Join(errs...); err != nil {
			stop()
			return protection{}, err
		}
		p.Mux.Handle("/metrics", reg.Handler())
		mountPage(p.Mux, r.Engine(), r.CPU(), r.Memory())
	}
	fmt.Fprintf(c.stdout, "policy %s: policy %s in force, reloaded on change and on SIGHUP\n", path, policyfile.HashString(r.Hash()))
	return protection{grpc: r.ServerOptions(), engine: r.Engine(), stop: stop}, nil
}
