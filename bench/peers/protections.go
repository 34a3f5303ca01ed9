package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	aegisrl "github.com/go-kratos/aegis/ratelimit"
	"github.com/go-kratos/aegis/ratelimit/bbr"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	grpcrl "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/zeromicro/go-zero/core/load"
	"github.com/zeromicro/go-zero/core/logx"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// go-zero's stat package, linked for the shedder, starts a goroutine in
// its init that logs the machine's CPU and memory every minute to stdout,
// in this process as in the servers; the tables go to stdout.
func init() { logx.Disable() }

// allocateMethod is the one method the CPU- or I/O-heavy scenarios load.
const allocateMethod = "/corecart.inventory.v1.InventoryService/Allocate"

// stockMethod is the cheap method: the mixed scenario's steady load, and
// the flood that -ceiling's server refuses.
const stockMethod = "/corecart.inventory.v1.InventoryService/GetStock"

// rateFraction is the share of the measured capacity that the static rate
// limit admits: what a careful operator would configure by hand.
const rateFraction = 0.8

// A protection is one way of protecting the inventory server. build runs
// in the server's process and returns its gRPC server options and a
// function that stops whatever it started (never nil).
type protection struct {
	name  string // the -protections name
	label string // the table's row
	short string // the summary's column
	about string // one line for the notes under the tables
	build func(s serverSpec) (opts []grpc.ServerOption, stop func(), err error)
	// connect, when set, serves the inventory through connect-go instead
	// of grpc-go (build is then unused): its middleware, its handler
	// options and the function that stops what it started. The load
	// reaches it through connect-go's gRPC protocol over h2c. It does not
	// serve the Feed stream (scenario stream).
	connect func(s serverSpec) (mw func(http.Handler) http.Handler, opts []connect.HandlerOption, stop func(), err error)
	// http, when set, serves the inventory as JSON over plain net/http
	// instead (inventory.HTTPHandler, a route per method, as `levee serve
	// -transport http` does; build is then unused): the middleware each
	// route is wrapped in and the function that stops what it started.
	// The load reaches it as JSON requests over h2c (webTarget). It
	// serves neither the Feed stream nor a shaped server (a scenario
	// whose work is not the inventory's own).
	http func(s serverSpec) (mw func(http.Handler) http.Handler, stop func(), err error)
	// extra leaves the protection out of the default run: -protections
	// must name it.
	extra bool
}

// protections are the contenders, in the order of the tables. Each peer is
// set up as its own documentation shows, with its defaults; only the
// static rate limit needs a number, the measured capacity.
var protections = []protection{
	{
		name: "none", label: "none", short: "none",
		about: "no protection",
		build: func(serverSpec) ([]grpc.ServerOption, func(), error) { return nil, func() {}, nil },
	},
	{
		name: "bbr", label: "kratos aegis BBR", short: "aegis BBR",
		about: "github.com/go-kratos/aegis/ratelimit/bbr with its defaults (CPU threshold 80%, 10 s window), as a unary interceptor the way kratos' ratelimit middleware calls it (and a stream interceptor doing the same around a stream)",
		build: bbrProtection,
	},
	{
		name: "gozero", label: "go-zero shedder", short: "go-zero",
		about: "github.com/zeromicro/go-zero/core/load adaptive shedder with its defaults (CPU threshold 90%, 5 s window), as a copy of zrpc's shedding interceptor (its drop log off; zrpc sheds unary calls only, a stream interceptor here does the same around a stream)",
		build: goZeroProtection,
	},
	{
		name: "failsafe", label: "failsafe-go adaptive limiter", short: "failsafe-go",
		about: "github.com/failsafe-go/failsafe-go/adaptivelimiter with its defaults, through its failsafegrpc adapter: the tap refuses when the limiter is full, the unary interceptor holds the permit and records the time (failsafegrpc has no stream interceptor: one here holds the permit for the stream's life)",
		build: failsafeProtection,
	},
	{
		name: "ratelimit", label: fmt.Sprintf("grpc-middleware ratelimit %.1f×", rateFraction), short: fmt.Sprintf("x/time/rate %.1f×", rateFraction),
		about: fmt.Sprintf("go-grpc-middleware v2 ratelimit interceptors (unary and stream) over golang.org/x/time/rate at %.1f× the measured capacity (burst 100 ms of it), on the loaded method only (Allocate, or the Feed stream)", rateFraction),
		build: rateLimitProtection,
	},
	{
		name: "ratelimit-never", label: "x/time/rate bucket, never refusing", short: "x/time/rate never",
		about: fmt.Sprintf("the ratelimit entry's interceptors and bucket at %g calls/s, a rate no server here reaches (burst as much): what a bucket costs every call while it refuses none (-peak; not in the default run)", neverRate),
		build: func(serverSpec) ([]grpc.ServerOption, func(), error) { return selectedBucket(neverRate) },
		extra: true,
	},
	{
		name: "hooks", label: "a tap and interceptors that decide nothing", short: "hooks",
		about: "a transport tap that hands each call to the interceptors in its context, and unary and stream interceptors that read it and call the handler (hooks.go): grpc-go's own price of protecting in the tap and the interceptor, the floor under any protection that does (-peak; not in the default run)",
		build: hooksProtection,
		extra: true,
	},
	{
		name: "levee", label: "levee preset", short: "levee preset",
		about: "levee's one-call preset, protect.New(), told no number (levee.go)",
		build: func(serverSpec) ([]grpc.ServerOption, func(), error) { return leveeProtection() },
	},
	{
		name: "levee-connect", label: "levee preset on connect-go", short: "levee connect",
		about: "the same preset served through connect-go: connectguard's middleware (before the body) and interceptor (the turn) on protect.New()'s engine, the load through connect-go's gRPC protocol over h2c (levee.go; not the stream scenario; not in the default run)",
		connect: func(serverSpec) (func(http.Handler) http.Handler, []connect.HandlerOption, func(), error) {
			return leveeConnect()
		},
		extra: true,
	},
	{
		name: "none-connect", label: "none on connect-go", short: "none connect",
		about: "no protection, served through connect-go as levee-connect is (not the stream scenario; not in the default run)",
		connect: func(serverSpec) (func(http.Handler) http.Handler, []connect.HandlerOption, func(), error) {
			return func(h http.Handler) http.Handler { return h }, nil, func() {}, nil
		},
		extra: true,
	},
	{
		name: "levee-http", label: "levee preset on net/http", short: "levee http",
		about: "the same preset in front of the inventory's JSON routes on plain net/http: httpguard's middleware on protect.New()'s engine, each route's flow named after the gRPC method it serves, the load as JSON requests over h2c (levee.go; cpu, io, mixed, clumps and cores2 only; not in the default run)",
		http:  func(serverSpec) (func(http.Handler) http.Handler, func(), error) { return leveeHTTP() },
		extra: true,
	},
	{
		name: "failsafehttp", label: "failsafe-go adaptive limiter on net/http", short: "failsafehttp",
		about: "github.com/failsafe-go/failsafe-go/adaptivelimiter with its defaults, one limiter for every route, through its failsafehttp handler (429 when the limiter is full) in front of the same JSON routes (as levee-http; not in the default run)",
		http:  failsafeHTTPProtection,
		extra: true,
	},
	{
		name: "none-http", label: "none on net/http", short: "none http",
		about: "no protection, the same JSON routes on plain net/http (as levee-http; not in the default run)",
		http: func(serverSpec) (func(http.Handler) http.Handler, func(), error) {
			return func(h http.Handler) http.Handler { return h }, func() {}, nil
		},
		extra: true,
	},
	{
		name: "levee-bucket", label: fmt.Sprintf("levee token bucket %.1f× (told the capacity)", rateFraction), short: "levee bucket",
		about: fmt.Sprintf("levee's cheapest refusal: one ratelimit token bucket at %.1f× the measured capacity (burst 100 ms of it) in grpc-go's transport tap, on the loaded method only (levee.go); the yardstick for the cost of a refusal", rateFraction),
		build: func(serverSpec) ([]grpc.ServerOption, func(), error) { return leveeBucket(rateFraction) },
	},
	{
		name: "bucket-plain", label: fmt.Sprintf("token bucket %.1f×, bare status", rateFraction), short: "bucket plain",
		about: fmt.Sprintf("levee-bucket's bucket (%.1f× the measured capacity, burst 100 ms of it, in grpc-go's tap, on the loaded method only) refusing with a bare RESOURCE_EXHAUSTED status, no details (not in the default run): against levee-bucket, what the refusal's details (RetryInfo, ErrorInfo) cost the server and its client", rateFraction),
		build: func(serverSpec) ([]grpc.ServerOption, func(), error) { return plainBucket(rateFraction) },
		extra: true,
	},
	{
		name: "levee-bucket-full", label: "levee token bucket 1.0× (told the capacity)", short: "levee bucket 1.0×",
		about: "the same bucket at the whole measured capacity (not in the default run): on the one-core CPU-bound shapes, about what refusing in grpc-go's tap leaves of the CPU in the spike; not a bound elsewhere (on io, calls admitted at the capacity queue for the database past their deadline)",
		build: func(serverSpec) ([]grpc.ServerOption, func(), error) { return leveeBucket(1) },
		extra: true,
	},
	{
		name: "levee-refuse-all", label: "levee refusing every call", short: "levee refuse-all",
		about: "the same bucket at rate 0 (not in the default run): it refuses every call in grpc-go's tap, so the server's CPU in the spike is what refusing the spike's whole load costs a server that does nothing else (one that also serves reads requests in bigger batches and pays less: -ceiling measures what such a server keeps)",
		build: func(serverSpec) ([]grpc.ServerOption, func(), error) { return leveeBucket(0) },
		extra: true,
	},
	{
		name: "levee-refuse-stock", label: "levee refusing every GetStock", short: "levee refuse-stock",
		about: "the same bucket at rate 0 on GetStock only, Allocate unguarded: the server of -ceiling, which measures Allocate closed-loop while the tap refuses a flood of GetStock (not in the default run)",
		build: func(serverSpec) ([]grpc.ServerOption, func(), error) { return leveeRefuse(stockMethod) },
		extra: true,
	},
	{
		name: "levee-connect-refuse-all", label: "levee refusing every call on connect-go", short: "levee connect refuse-all",
		about: "levee-refuse-all's bucket in connectguard's middleware, before connect-go reads the body: connect-go's counterpart of levee-refuse-all, what refusing the whole load costs a connect-go server (not in the default run)",
		connect: func(serverSpec) (func(http.Handler) http.Handler, []connect.HandlerOption, func(), error) {
			return connectRefuse(allocateMethod)
		},
		extra: true,
	},
	{
		name: "levee-connect-refuse-stock", label: "levee refusing every GetStock on connect-go", short: "levee connect refuse-stock",
		about: "levee-refuse-stock's bucket in connectguard's middleware: -ceiling's server on connect-go (not in the default run)",
		connect: func(serverSpec) (func(http.Handler) http.Handler, []connect.HandlerOption, func(), error) {
			return connectRefuse(stockMethod)
		},
		extra: true,
	},
	{
		name: "levee-http-refuse-all", label: "levee refusing every Allocate on net/http", short: "levee http refuse-all",
		about: "levee-refuse-all's bucket in httpguard's middleware in front of the JSON routes: what refusing the whole load costs a net/http server (not in the default run)",
		http:  func(serverSpec) (func(http.Handler) http.Handler, func(), error) { return httpRefuse(allocateMethod) },
		extra: true,
	},
	{
		name: "levee-http-refuse-stock", label: "levee refusing every GetStock on net/http", short: "levee http refuse-stock",
		about: "levee-refuse-stock's bucket in httpguard's middleware: -ceiling's server on net/http (not in the default run)",
		http:  func(serverSpec) (func(http.Handler) http.Handler, func(), error) { return httpRefuse(stockMethod) },
		extra: true,
	},
	{
		name: "levee-static", label: "levee static recipe (told the capacity)", short: "levee static",
		about: "levee serve -recipe static, a fixed chain sized from the measured capacity and CPU work (levee.go)",
		build: func(serverSpec) ([]grpc.ServerOption, func(), error) { return leveeStatic() },
	},
}

// The transports a protection serves the inventory through.
const (
	transportGRPC    = "grpc"    // grpc-go
	transportConnect = "connect" // connect-go, the load through its gRPC protocol
	transportHTTP    = "http"    // the JSON routes on net/http
)

// transport returns the transport p serves the inventory through. The
// unprotected server of each is "none-" + its name ("none" for grpc-go).
func (p protection) transport() string {
	switch {
	case p.connect != nil:
		return transportConnect
	case p.http != nil:
		return transportHTTP
	}
	return transportGRPC
}

// transportLabel names transport t after a server in the notes: "" for
// grpc-go, the transport the capacity is otherwise measured on.
func transportLabel(t string) string {
	switch t {
	case transportConnect:
		return " on connect-go"
	case transportHTTP:
		return " on net/http (JSON)"
	}
	return ""
}

// protectionNamed returns the protection called name.
func protectionNamed(name string) (protection, bool) {
	for _, p := range protections {
		if p.name == name {
			return p, true
		}
	}
	return protection{}, false
}

func protectionNames() string {
	names := make([]string, 0, len(protections))
	for _, p := range protections {
		names = append(names, p.name)
	}
	return strings.Join(names, ",")
}

// defaultProtections names the protections of the default run: all but
// the extra ones.
func defaultProtections() string {
	var names []string
	for _, p := range protections {
		if !p.extra {
			names = append(names, p.name)
		}
	}
	return strings.Join(names, ",")
}

// refused is the status of a call a peer refused. The peers' own gRPC
// integrations answer RESOURCE_EXHAUSTED too (kratos maps its 429, zrpc
// and go-grpc-middleware use the code), so every refusal is counted alike.
func refused(who string, err error) error {
	return status.Error(codes.ResourceExhausted, who+": "+err.Error())
}

// bbrProtection is kratos' middleware/ratelimit around an aegis BBR
// limiter.
func bbrProtection(serverSpec) ([]grpc.ServerOption, func(), error) {
	l := bbr.NewLimiter()
	intercept := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		done, err := l.Allow()
		if err != nil {
			return nil, refused("aegis bbr", err)
		}
		resp, err := handler(ctx, req)
		done(aegisrl.DoneInfo{Err: err})
		return resp, err
	}
	stream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		done, err := l.Allow()
		if err != nil {
			return refused("aegis bbr", err)
		}
		err = handler(srv, ss)
		done(aegisrl.DoneInfo{Err: err})
		return err
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(intercept), grpc.ChainStreamInterceptor(stream)}, func() {}, nil
}

// goZeroProtection is zrpc's UnarySheddingInterceptor (an internal
// package of go-zero, so copied here without its metrics) around the
// adaptive shedder. go-zero logs every drop at error level by default;
// the log is off (see init) so that the server does not spend its CPU
// writing to the benchmark's pipe.
func goZeroProtection(serverSpec) ([]grpc.ServerOption, func(), error) {
	load.DisableLog()
	shedder := load.NewAdaptiveShedder()
	admit := func(run func() error) (err error) {
		promise, err := shedder.Allow()
		if err != nil {
			return refused("go-zero", err)
		}
		defer func() {
			if errors.Is(err, context.DeadlineExceeded) {
				promise.Fail()
			} else {
				promise.Pass()
			}
		}()
		return run()
	}
	intercept := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		err = admit(func() error {
			resp, err = handler(ctx, req)
			return err
		})
		return resp, err
	}
	stream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return admit(func() error { return handler(srv, ss) })
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(intercept), grpc.ChainStreamInterceptor(stream)}, func() {}, nil
}

// failsafeProtection installs one adaptive limiter twice through
// failsafegrpc: as a tap, which only checks that a permit is free and so
// refuses before a stream exists, and as a unary interceptor, which takes
// the permit for the handler's run and records its time (a tap alone
// takes no permit, so the limiter would never fill).
func failsafeProtection(serverSpec) ([]grpc.ServerOption, func(), error) {
	lim := adaptivelimiter.NewWithDefaults[any]()
	inTap := failsafegrpc.NewServerInHandle[any](lim)
	inHandler := failsafegrpc.NewUnaryServerInterceptor[any](lim)
	tapFn := func(ctx context.Context, info *tap.Info) (context.Context, error) {
		ctx, err := inTap(ctx, info)
		if errors.Is(err, adaptivelimiter.ErrExceeded) {
			err = refused("failsafe-go", err)
		}
		return ctx, err
	}
	intercept := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := inHandler(ctx, req, info, handler)
		if errors.Is(err, adaptivelimiter.ErrExceeded) {
			err = refused("failsafe-go", err)
		}
		return resp, err
	}
	exec := failsafe.With[any](lim)
	stream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		err := exec.Run(func() error { return handler(srv, ss) })
		if errors.Is(err, adaptivelimiter.ErrExceeded) {
			err = refused("failsafe-go", err)
		}
		return err
	}
	return []grpc.ServerOption{grpc.InTapHandle(tapFn), grpc.ChainUnaryInterceptor(intercept), grpc.ChainStreamInterceptor(stream)}, func() {}, nil
}

// failsafeHTTPProtection is failsafe-go's HTTP middleware
// (failsafehttp.NewHandler) around one adaptive limiter with its
// defaults, shared by every route as failsafeProtection's is by every
// method: the limiter is full, failsafehttp answers 429.
func failsafeHTTPProtection(serverSpec) (func(http.Handler) http.Handler, func(), error) {
	lim := adaptivelimiter.NewWithDefaults[*http.Response]()
	return func(h http.Handler) http.Handler { return failsafehttp.NewHandler(h, lim) }, func() {}, nil
}

// rateLimiter adapts an x/time/rate limiter to go-grpc-middleware's
// ratelimit.Limiter.
type rateLimiter struct{ l *rate.Limiter }

func (r rateLimiter) Limit(context.Context) error {
	if !r.l.Allow() {
		return errors.New("rate limit exceeded")
	}
	return nil
}

// rateLimitProtection is a static token bucket at rateFraction of the
// measured capacity, applied to the method the capacity was measured for
// (Allocate, or the Feed stream) with go-grpc-middleware's selector.
func rateLimitProtection(s serverSpec) ([]grpc.ServerOption, func(), error) {
	if !(s.Capacity > 0) {
		return nil, func() {}, fmt.Errorf("ratelimit: needs the measured capacity, got %v", s.Capacity)
	}
	return selectedBucket(rateFraction * s.Capacity)
}

// neverRate is the rate of the ratelimit-never entry's bucket: far above
// what any server here serves, so that it never refuses.
const neverRate = 1e9

// selectedBucket is go-grpc-middleware's ratelimit interceptors over an
// x/time/rate bucket of r calls/s (burst a tenth of a second's worth),
// on the loaded method only (Allocate, or the Feed stream).
func selectedBucket(r float64) ([]grpc.ServerOption, func(), error) {
	l := rateLimiter{rate.NewLimiter(rate.Limit(r), max(1, int(r/10)))}
	loaded := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return c.FullMethod() == allocateMethod || c.FullMethod() == feedMethod
	})
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(selector.UnaryServerInterceptor(grpcrl.UnaryServerInterceptor(l), loaded)),
		grpc.ChainStreamInterceptor(selector.StreamServerInterceptor(grpcrl.StreamServerInterceptor(l), loaded)),
	}, func() {}, nil
}
