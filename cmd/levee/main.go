// Command levee runs the levee overload demo, the protected CoreCart
// inventory service and an open-loop load generator.
//
// Usage:
//
//	levee demo  [flags]   unprotected vs protected server under a 10× spike
//	levee serve [flags]   the inventory service, protected unless -unprotected
//	levee load  [flags]   open-loop load against a running server
//	levee status [flags] ADDR   what a running server is doing, from its debug page
//	levee policy check|print|example   validate, show or write a policy file
//
// Run `levee <command> -h` for a command's flags. A bad flag or argument
// prints one line to stderr and exits with status 2; a failure while
// running exits with status 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/levee-go/levee/cmd/levee/internal/scenario"
	"github.com/levee-go/levee/internal/harness/loadgen"
	"github.com/levee-go/levee/protect"
)

func main() {
	os.Exit(newCLI().run(context.Background(), os.Args[1:]))
}

// cli is one invocation of the command.
type cli struct {
	stdout, stderr io.Writer
	// stdin is what `levee policy check -` reads; nil: os.Stdin.
	stdin io.Reader
	// exe is the binary `levee demo` re-executes to start its servers.
	exe string
	// childEnv is added to the environment of those servers.
	childEnv []string
	// help prints the help of the command being parsed.
	help func()
	// readyTimeout bounds the wait for a target's health check.
	readyTimeout time.Duration
	// presetOptions are added to the options of `levee serve`'s preset:
	// tests force its signals through them.
	presetOptions []protect.Option
	// scenarios returns the scenarios of `levee demo`; nil:
	// demoScenarios. Tests run the command around a scenario of their own.
	scenarios func() (*scenario.Registry, error)
}

func newCLI() *cli {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return &cli{stdout: os.Stdout, stderr: os.Stderr, exe: exe, readyTimeout: 3 * time.Second}
}

const usage = `levee keeps gRPC services alive under overload.

Usage:
  levee demo  [flags]   run the overload demo: the same 10x spike against the
                        unprotected and the protected inventory service
  levee serve [flags]   serve the CoreCart inventory service
  levee load  [flags]   drive open-loop load against a running server
  levee status [flags] ADDR
                        print a running server's debug page: its limits,
                        its signals of overload, its last refusals and why
  levee policy check|print|example
                        validate a policy file, print its effective form,
                        or print a commented example

Run "levee <command> -h" for the flags of a command.
`

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // something failed while running
	exitUsage = 2 // bad command line
)

// errUsage marks errors in the command line.
var errUsage = errors.New("usage")

// usageError is a bad-command-line error.
func usageError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

func (c *cli) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, usage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "demo":
		err = c.demo(ctx, args[1:])
	case "serve":
		err = c.serve(ctx, args[1:])
	case "load":
		err = c.load(ctx, args[1:])
	case "status":
		err = c.status(ctx, args[1:])
	case "policy":
		err = c.policy(args[1:])
	case "help", "-h", "-help", "--help":
		fmt.Fprint(c.stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(c.stderr, "levee: unknown command %q (want demo, serve, load, status or policy; see levee -h)\n", args[0])
		return exitUsage
	}
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errReported):
		return exitFail
	case errors.Is(err, errUsage):
		fmt.Fprintf(c.stderr, "levee %s: %s\n", args[0], oneLine(strings.TrimPrefix(err.Error(), errUsage.Error()+": ")))
		return exitUsage
	case errors.Is(err, loadgen.ErrInvalid):
		// The generator's schedule and options come from the command line.
		fmt.Fprintf(c.stderr, "levee %s: %s\n", args[0], oneLine(err.Error()))
		return exitUsage
	default:
		fmt.Fprintf(c.stderr, "levee %s: %s\n", args[0], oneLine(err.Error()))
		return exitFail
	}
}

// signalContext returns a context that the first SIGINT or SIGTERM
// cancels, for a command to stop gracefully. Once it is done (by a signal
// or by ctx) the signals are no longer caught: a second one ends the
// process at once (Go's default action), in the middle of a graceful stop
// the operator does not want to wait for. stop releases them earlier.
func signalContext(ctx context.Context) (_ context.Context, stop context.CancelFunc) {
	ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// newFlagSet returns a flag set that reports errors instead of printing
// them; parse prints the help to stdout when asked with -h.
func (c *cli) newFlagSet(name, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet("levee "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // the flag package calls it on every error
	c.help = func() {
		fmt.Fprintf(c.stdout, "Usage: levee %s [flags]\n\n%s\n\nFlags:\n", name, summary)
		fs.SetOutput(c.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parse parses args into fs; an error is a usage error (or flag.ErrHelp
// after printing the help).
func (c *cli) parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.help()
			return err
		}
		return usageError("%v (see %s -h)", err, fs.Name())
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q (see %s -h)", fs.Arg(0), fs.Name())
	}
	return nil
}

// capacityFlag is a capacity in calls/s given on the command line:
// "auto" (the default: measure it) or a number > 0.
type capacityFlag struct {
	auto  bool
	value float64
}

func (f *capacityFlag) String() string {
	if f == nil || f.auto {
		return "auto"
	}
	return strconv.FormatFloat(f.value, 'g', -1, 64)
}

func (f *capacityFlag) Set(s string) error {
	if s == "auto" {
		f.auto, f.value = true, 0
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("want calls/s or \"auto\", got %q", s)
	}
	if !(v > 0) || v > 1e9 {
		return fmt.Errorf("must be > 0 calls/s (or \"auto\" to measure it), got %s", s)
	}
	f.auto, f.value = false, v
	return nil
}

// positive checks that a duration flag is > 0.
func positive(name string, d time.Duration) error {
	if d <= 0 {
		return usageError("-%s must be > 0, got %v", name, d)
	}
	return nil
}
