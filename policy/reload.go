package policy

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/cpu"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/grpcguard"
	"github.com/levee-go/levee/internal/nilness"
	"github.com/levee-go/levee/internal/preset"
	"github.com/levee-go/levee/memory"
)

// Option configures a Reloader. Options only record values. A nil Option
// is ignored.
type Option func(*options)

type options struct {
	cpu      cpu.Signal
	cpuGiven bool // WithCPU or WithoutCPU
	mem      memory.Signal
	memGiven bool // WithMemory or WithoutMemory
	logf     func(format string, args ...any)
}

// WithCPU gives the guards that follow the CPU signal (the preset's run
// limit, runlimit and loadshed guards) a signal of your own, such as a
// *cpu.Monitor you run for the life of the Reloader; nil, or a nil
// pointer such as a (*cpu.Monitor)(nil), is WithoutCPU.
// Default: the CPU signal protect.New uses — this process's CPU source
// (cpu.Detect) sampled with the preset's tuning by a monitor the Reloader
// starts and stops (Reloader.CPU) — or none if no source can be read.
func WithCPU(c cpu.Signal) Option {
	return func(o *options) {
		if nilness.Is(c) {
			c = nil
		}
		o.cpu, o.cpuGiven = c, true
	}
}

// WithoutCPU turns the CPU signal off: the run limits then follow service
// times alone, and a policy with a loadshed guard does not build.
func WithoutCPU() Option { return func(o *options) { o.cpu, o.cpuGiven = nil, true } }

// WithMemory gives the preset a memory signal of your own, such as a
// *memory.Monitor you run for the life of the Reloader; nil, or a nil
// pointer such as a (*memory.Monitor)(nil), is WithoutMemory. Default: the memory signal protect.New uses — this
// process's memory source (memory.Detect), sampled by a monitor the
// Reloader starts and stops (Reloader.Memory), with the soft memory limit
// protect.New sets (a cgroup limit and no GOMEMLIMIT: 90% of it, put back
// by Close). The preset adds its memory
// guard only if the signal is Limited when a policy is built, and the
// file's preset.memory is true.
func WithMemory(m memory.Signal) Option {
	return func(o *options) {
		if nilness.Is(m) {
			m = nil
		}
		o.mem, o.memGiven = m, true
	}
}

// WithoutMemory turns the memory signal off: the preset has no memory
// guard.
func WithoutMemory() Option { return func(o *options) { o.mem, o.memGiven = nil, true } }

// WithLogf sets where the Reloader says what it did (a reload, a rejected
// file). Default log.Printf.
func WithLogf(logf func(format string, args ...any)) Option {
	return func(o *options) { o.logf = logf }
}

// Reloader runs a policy file in an engine (decide.Engine) with a
// grpcguard.Server on it, and reloads it: on
// Reload (call it on SIGHUP) and, once Watch is called, whenever the file
// changes, including the symlink swap by which Kubernetes updates a
// mounted ConfigMap.
//
// A reload reads the file, decodes and validates it, builds its guards,
// then swaps the engine's rules in one atomic step (decide.Engine.Swap).
// A file that fails any step leaves the policy in force as it was, and is
// reported: a log line and the failed count of Reloads. Calls in flight
// finish under the rules that admitted them and give their permits back to
// those guards. A guard whose rule, name, type and parameters did not
// change is the same instance after the reload, with its learned state
// (tokens, learned limits and service times) and its counters; a rule
// whose guards and shadow mode did not change keeps its decision counts,
// with the refusals its shadow guards let through, and a rule that changed
// counts both anew. Guards no longer used are stopped, and their counts
// leave Stats.
//
// The engine's Observer (Engine().SetObserver) outlives reloads: it is
// told of the refusals of every policy put in force, and of each move of
// the learned limit of every run limit the policy in force holds (the
// preset's, Guard "run", and each runlimit guard's, by its name), a run
// limit a reload made included; a run limit a reload dropped is no
// longer told of.
//
// Create one with NewReloader; the zero value is not usable. A Reloader is
// safe for concurrent use. Close it when the gRPC server has stopped.
type Reloader struct {
	path        string
	o           options
	engine      *decide.Engine
	server      *grpcguard.Server
	monitor     *cpu.Monitor    // nil unless NewReloader started it
	memMon      *memory.Monitor // nil unless NewReloader started it
	restoreSoft func()          // puts back the runtime's soft memory limit; nil if none was set

	mu        sync.Mutex // serialises reloads and Close
	cur       atomic.Pointer[built]
	lastBytes []byte // the file's content at the last reload attempt
	closed    bool

	ok, failed atomic.Uint64

	watcher *fsnotify.Watcher
	done    chan struct{} // closed when the watch goroutine ends
	// reported, set by in-package tests, is called after each reload
	// attempt with its error.
	reported func(error)
}

// NewReloader loads the policy file at path into a new engine and a
// grpcguard.Server on it.
// It returns an error (an Errors for a bad file) and starts nothing when
// the file cannot be read, decoded or built.
func NewReloader(path string, opts ...Option) (*Reloader, error) {
	r := &Reloader{path: path}
	for _, opt := range opts {
		if opt != nil {
			opt(&r.o)
		}
	}
	if r.o.logf == nil {
		r.o.logf = log.Printf
	}
	data, err := ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := Decode(path, data)
	if err != nil {
		return nil, err
	}
	if !r.o.cpuGiven {
		if mon, err := preset.NewCPUMonitor(); err == nil {
			r.monitor, r.o.cpu = mon, mon
		}
	}
	if !r.o.memGiven {
		if mon, err := preset.NewMemoryMonitor(); err == nil {
			r.memMon, r.o.mem = mon, mon
			r.restoreSoft, _ = preset.SetSoftLimit(mon)
		}
	}
	b, err := build(p, p.Hash(), nil, r.o.cpu, r.o.mem)
	if err != nil {
		r.closeMonitor()
		return nil, err
	}
	e, err := decide.New(b.rules, decide.WithExempt(b.exempt...))
	if err != nil {
		b.closeUnused(nil)
		r.closeMonitor()
		return nil, fmt.Errorf("policy: %w", err)
	}
	srv, err := grpcguard.ForEngine(e)
	if err != nil {
		b.closeUnused(nil)
		r.closeMonitor()
		return nil, fmt.Errorf("policy: %w", err)
	}
	b.tellMoves(e)
	r.engine, r.server = e, srv
	r.lastBytes = data
	r.cur.Store(b)
	return r, nil
}

// CPU returns the CPU monitor NewReloader started, or nil when the signal
// is off, given with WithCPU, or could not be read.
func (r *Reloader) CPU() *cpu.Monitor { return r.monitor }

// Memory returns the memory monitor NewReloader started, or nil when the
// signal is off, given with WithMemory, or could not be read.
func (r *Reloader) Memory() *memory.Monitor { return r.memMon }

func (r *Reloader) closeMonitor() {
	if r.monitor != nil {
		r.monitor.Close()
	}
	if r.memMon != nil {
		r.memMon.Close()
	}
	if r.restoreSoft != nil {
		r.restoreSoft()
	}
}

// Server returns the gRPC transport that runs the policy.
func (r *Reloader) Server() *grpcguard.Server { return r.server }

// Engine returns the engine that runs the policy, for another front-end
// (connect-go, net/http) to share.
func (r *Reloader) Engine() *decide.Engine { return r.engine }

// ServerOptions returns the options that install the policy in a
// grpc.Server (the Server's tap handle and interceptors).
func (r *Reloader) ServerOptions() []grpc.ServerOption { return r.server.ServerOptions() }

// Policy returns the policy in force.
func (r *Reloader) Policy() *Policy { return r.cur.Load().policy }

// Hash returns the Hash of the policy in force.
func (r *Reloader) Hash() uint64 { return r.cur.Load().hash }

// Reloads returns how many reloads succeeded and how many failed since
// NewReloader.
func (r *Reloader) Reloads() (ok, failed uint64) { return r.ok.Load(), r.failed.Load() }

// Stats returns the decision counts of every guard of the policy in force
// (a guard in shadow mode on its own counts the calls it let through as
// ShadowRefused). A rule's counts go on across reloads that leave its
// guards and shadow modes as they were; a reload that changes them (adds,
// drops, reorders or retunes a guard, or shadows one) starts all of the
// rule's counts anew, its ShadowRefused too. With HandlerStarts it makes
// the Reloader a metrics.ServerSource.
func (r *Reloader) Stats() []admission.GuardStats {
	b := r.cur.Load()
	return b.stats(r.server.Stats())
}

// HandlerStarts returns how many handlers started on guarded calls.
func (r *Reloader) HandlerStarts() uint64 { return r.server.HandlerStarts() }

// RefusalCounts returns the refusals of the Reloader's engine by guard,
// reason and evidence since NewReloader, over every policy it put in
// force (decide.Engine.RefusalCounts); with it the Reloader's
// levee_refusals_total is exported by metrics.Registry.AddServer.
func (r *Reloader) RefusalCounts() []decide.RefusalCount { return r.engine.RefusalCounts() }

// Reload reads the file again and puts its policy in force. On error the
// policy in force stays, and the error says why (an Errors for a bad
// file). Reloading an unchanged file succeeds and changes nothing.
func (r *Reloader) Reload() error { return r.reload(true) }

// reload reloads the file; unless forced, an unchanged file is skipped
// without a report (a watch sees several events per change).
func (r *Reloader) reload(force bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("policy: Reloader is closed")
	}
	data, err := ReadFile(r.path)
	if err == nil && !force && bytes.Equal(data, r.lastBytes) {
		return nil
	}
	if err == nil {
		r.lastBytes = data
		err = r.apply(data)
	} else {
		err = fmt.Errorf("policy: %w", err)
	}
	cur := r.cur.Load()
	if err != nil {
		r.failed.Add(1)
		r.o.logf("levee: policy %s rejected, keeping policy %s: %s", r.path, HashString(cur.hash), oneLine(err))
	} else {
		r.ok.Add(1)
		r.o.logf("levee: policy %s loaded: policy %s in force", r.path, HashString(cur.hash))
	}
	if r.reported != nil {
		r.reported(err)
	}
	return err
}

// apply decodes, builds and swaps in data.
func (r *Reloader) apply(data []byte) error {
	p, err := Decode(r.path, data)
	if err != nil {
		return err
	}
	prev := r.cur.Load()
	hash := p.Hash()
	if hash == prev.hash {
		return nil
	}
	b, err := build(p, hash, prev, r.o.cpu, r.o.mem)
	if err != nil {
		return err
	}
	b.tellMoves(r.engine)
	if err := r.engine.Swap(b.rules, decide.WithExempt(b.exempt...)); err != nil {
		b.closeUnused(prev)
		return fmt.Errorf("policy: %w", err)
	}
	r.cur.Store(b)
	prev.closeUnused(b)
	return nil
}

func oneLine(err error) string {
	var es Errors
	if errors.As(err, &es) && len(es) > 1 {
		return fmt.Sprintf("%s (and %d more)", es[0], len(es)-1)
	}
	return err.Error()
}

// Watch starts watching the file: the directory that holds it, the
// directory of each symlink met on the way to it, and the directory it
// resolves to, again after every change (a Kubernetes ConfigMap is a
// symlink through ..data, a symlink to a directory that is swapped whole;
// a deploy may swap a "current" symlink to a release above the file). Each change reloads the file as Reload does, except that a file
// whose content did not change is skipped silently. Close stops the
// watch. It returns an error if the watch cannot start or is started
// twice.
func (r *Reloader) Watch() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("policy: Reloader is closed")
	}
	if r.watcher != nil {
		return errors.New("policy: Watch called twice")
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("policy: watching %s: %w", r.path, err)
	}
	if err := watchDirs(w, r.path); err != nil {
		_ = w.Close()
		return fmt.Errorf("policy: watching %s: %w", r.path, err)
	}
	r.watcher = w
	r.done = make(chan struct{})
	go r.watch(w)
	return nil
}

// watchDirs adds the directories a change in which may change what path
// reads (watchedDirs) that w does not watch. What w watches is its own
// list (WatchList), not a record of the directories added: the watch of a
// deleted directory ends (a release removed, a ConfigMap's old timestamped
// directory), and one re-created under its name (a rollback re-extracting
// the release the symlink goes back to) must be watched again.
func watchDirs(w *fsnotify.Watcher, path string) error {
	have := w.WatchList()
	for _, d := range watchedDirs(path) {
		if slices.Contains(have, d) {
			continue
		}
		if err := w.Add(d); err != nil {
			return err
		}
	}
	return nil
}

// maxHops bounds the symlinks followed to resolve the file, as the
// kernel's 40 does.
const maxHops = 40

// watchedDirs returns the directories a change in which may change what
// path reads: the directory of path; the directory holding each symlink
// met while resolving it, where a deploy renames a new symlink over it
// (a ConfigMap's ..data beside the file, a "current" release above it);
// and the directory of the file it resolves to, where the file itself is
// written or renamed over.
func watchedDirs(path string) []string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	dirs := []string{filepath.Dir(path)}
	add := func(d string) {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	cur := filepath.Clean(path)
	for range maxHops {
		link, rest, ok := firstSymlink(cur)
		if !ok {
			add(filepath.Dir(cur))
			return dirs
		}
		add(filepath.Dir(link))
		target, err := os.Readlink(link)
		if err != nil {
			return dirs
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(link), target)
		}
		cur = filepath.Join(target, rest)
	}
	return dirs
}

// firstSymlink returns the shortest prefix of the clean absolute path p
// that is a symlink, and what follows it; false when none is.
func firstSymlink(p string) (link, rest string, ok bool) {
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != filepath.Separator {
			continue
		}
		prefix := p[:i]
		if fi, err := os.Lstat(prefix); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return prefix, strings.TrimPrefix(p[i:], string(filepath.Separator)), true
		}
	}
	return "", "", false
}

func (r *Reloader) watch(w *fsnotify.Watcher) {
	defer close(r.done)
	for {
		select {
		case _, ok := <-w.Events:
			if !ok {
				return
			}
			// Any change in a watched directory may be the file's: an
			// edit, a rename over it, a swap of the symlink it goes
			// through. Reading it again tells.
			_ = watchDirs(w, r.path)
			_ = r.reload(false)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			r.o.logf("levee: watching policy %s: %v", r.path, err)
		}
	}
}

// Close stops the watch and the guards the policy started (sweepers, load
// shedders). Calls still running finish normally. It is safe to call more
// than once.
func (r *Reloader) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	w := r.watcher
	r.mu.Unlock()
	if w != nil {
		_ = w.Close()
		<-r.done
	}
	r.cur.Load().closeUnused(nil)
	r.closeMonitor()
}
