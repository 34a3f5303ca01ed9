package main

import (
	"flag"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/connlimit"
	"github.com/levee-go/levee/goaway"
	"github.com/levee-go/levee/internal/harness/stats"
	"github.com/levee-go/levee/protect"
)

// connFlags are the connection guards of `levee serve`: caps on the
// connections open (package connlimit) and GOAWAY under sustained
// overload (package goaway, through protect.Server.GoAway).
type connFlags struct {
	maxConns, perPeer int
	fdLimit           int
	goaway            bool
	after, every      time.Duration

	lis *connlimit.Listener // nil: the listener is not wrapped
}

func (f *connFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.maxConns, "max-conns", 0, "cap on the gRPC connections open at once: one beyond it is reset as soon as it is accepted, while those open keep being served (0: protected, where the process would run out of file descriptors, protect.DefaultMaxConns; unprotected, none; -1: none)")
	fs.IntVar(&f.perPeer, "max-conns-per-peer", 0, "cap on the connections one client (an IP address; IPv6: its /64) keeps open: beyond it a connection is reset at once (0: none; clients behind one NAT or proxy share it)")
	fs.IntVar(&f.fdLimit, "fd-limit", 0, "set this process's limit on open files (RLIMIT_NOFILE) to `N` before serving, as a container may (Linux; 0: as inherited); the connections demo gives both its servers the same")
	fs.BoolVar(&f.goaway, "goaway", false, "preset recipe: while the preset has evidence of overload for -goaway-after, send a graceful GOAWAY to an eighth of the connections every -goaway-every (jittered), so that clients behind a load balancer reconnect to other replicas; no call fails")
	fs.DurationVar(&f.after, "goaway-after", goaway.DefaultSustain, "with -goaway, how long the overload must last before the first GOAWAY")
	fs.DurationVar(&f.every, "goaway-every", goaway.DefaultEvery, "with -goaway, the mean time between GOAWAY rounds while the overload lasts")
}

// check validates the flags; notPreset is a protection other than the
// preset (-recipe static or -policy), given the names of the flags given.
func (f *connFlags) check(unprotected, notPreset bool, transport string, given map[string]bool) error {
	if f.maxConns < -1 {
		return usageError("-max-conns must be >= 0 (or -1: no cap), got %d", f.maxConns)
	}
	if f.perPeer < 0 {
		return usageError("-max-conns-per-peer must be >= 0, got %d", f.perPeer)
	}
	if f.fdLimit < 0 || f.fdLimit > 0 && f.fdLimit < 32 {
		return usageError("-fd-limit must be 0 or at least 32, got %d", f.fdLimit)
	}
	if f.after < 0 {
		return usageError("-goaway-after must be >= 0, got %v", f.after)
	}
	if err := positive("goaway-every", f.every); err != nil {
		return err
	}
	if !f.goaway && (given["goaway-after"] || given["goaway-every"]) {
		return usageError("-goaway-after and -goaway-every need -goaway")
	}
	if f.goaway && (unprotected || notPreset) {
		return usageError("-goaway works with the preset recipe only (not -unprotected, -recipe %s or -policy): the preset's evidence of overload decides", recipeStatic)
	}
	if f.goaway && transport != transportGRPC {
		return usageError("-goaway works with -transport %s only", transportGRPC)
	}
	return nil
}

// limitFDs applies -fd-limit; the process must not have opened its
// listeners yet (the default cap is read from the limit).
func (f *connFlags) limitFDs() error {
	if f.fdLimit == 0 {
		return nil
	}
	return setFDLimit(f.fdLimit)
}

// listener wraps inner in the caps: -max-conns (by default, when
// protected, protect.DefaultMaxConns) and -max-conns-per-peer. It returns
// inner itself when nothing is capped.
func (f *connFlags) listener(inner net.Listener, protected bool) net.Listener {
	max := f.maxConns
	switch {
	case max == -1:
		max = 0
	case max == 0 && protected:
		max = protect.DefaultMaxConns()
	}
	if max == 0 && f.perPeer == 0 {
		return inner
	}
	// Cannot fail: check validated the numbers.
	f.lis, _ = connlimit.NewListener(inner, connlimit.WithMaxConns(max), connlimit.WithMaxConnsPerPeer(f.perPeer))
	return f.lis
}

// serverOptions gives connections protect.HandshakeTimeout to complete
// their handshake when a cap was given: a silent one holds its place
// meanwhile.
func (f *connFlags) serverOptions() []grpc.ServerOption {
	if f.maxConns > 0 || f.perPeer > 0 {
		return []grpc.ServerOption{grpc.ConnectionTimeout(protect.HandshakeTimeout)}
	}
	return nil
}

// grpcServing is a *grpc.Server or a *goaway.Server.
type grpcServing interface {
	Serve(net.Listener) error
	GracefulStop()
	Stop()
}

// server returns the server to serve: build's, or with -goaway the
// preset's goaway.Server over servers build makes.
func (f *connFlags) server(build func() *grpc.Server, preset *protect.Server) (grpcServing, error) {
	if !f.goaway {
		return build(), nil
	}
	// A round's GOAWAY goes one check after it is due: look often enough
	// for short rounds.
	check := min(goaway.DefaultCheck, max(time.Millisecond, f.every/4))
	gs, err := preset.GoAway(build, goaway.WithSustain(f.after), goaway.WithEvery(f.every), goaway.WithCheck(check))
	if err != nil {
		return nil, fmt.Errorf("-goaway: %w", err)
	}
	return gs, nil
}

// gauges adds the connection guards' counters to /stats.
func (f *connFlags) gauges(g *stats.Gauges, rs rpcServer) {
	if f.lis != nil {
		l := f.lis
		g.Set("conns_open", func() float64 { return float64(l.Open()) })
		g.Set("conns_refused", func() float64 {
			st := l.Stats()
			return float64(st.RefusedCap + st.RefusedPeer + st.RefusedRate)
		})
	}
	if gs, ok := rs.(*grpcServer); ok {
		if ga, ok := gs.gs.(*goaway.Server); ok {
			g.Set("goaway_rounds", func() float64 { return float64(ga.Stats().Drains) })
		}
	}
}

// note is what the listening line says of the connection guards.
func (f *connFlags) note() string {
	s := ""
	if f.lis != nil {
		st := f.lis.Stats()
		s = fmt.Sprintf(" max-conns=%d max-conns-per-peer=%d", st.MaxConns, st.MaxConnsPerPeer)
	}
	if f.goaway {
		s += fmt.Sprintf(" goaway=%v/%v", f.after, f.every)
	}
	return s
}
