package policy

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/levee-go/levee/bulkhead"
	"github.com/levee-go/levee/internal/preset"
	"github.com/levee-go/levee/ratelimit"
	"github.com/levee-go/levee/runlimit"
)

// Kinds of guard parameter.
type paramKind int

const (
	pInt paramKind = iota
	pFloat
	pRate
	pDuration
	pBool
	pString
)

// param is one parameter of a guard type: its YAML name, its kind, where
// it lives in a Guard, and its bounds. Cross-field rules and defaults
// that depend on other fields are in the type's check and fill.
type param struct {
	name   string
	kind   paramKind
	int    func(g *Guard) *int
	float  func(g *Guard) *float64
	dur    func(g *Guard) *time.Duration
	bool   func(g *Guard) *bool
	str    func(g *Guard) *string
	lo, hi float64 // bounds of numbers (durations in nanoseconds)
	open   bool    // lo excluded
	enum   []string
}

// guardType is a guard type's parameters, required parameters, defaults
// and cross-field checks.
type guardType struct {
	params   []param
	required []string
	// fill sets the defaults of the parameters not given.
	fill func(g *Guard, given map[string]bool)
	// check returns cross-field problems: the parameter to blame and why.
	check func(g *Guard) [][2]string
}

func intP(name string, f func(*Guard) *int, lo, hi int) param {
	return param{name: name, kind: pInt, int: f, lo: float64(lo), hi: float64(hi)}
}

func durP(name string, f func(*Guard) *time.Duration, lo, hi time.Duration) param {
	return param{name: name, kind: pDuration, dur: f, lo: float64(lo), hi: float64(hi)}
}

func rateP(f func(*Guard) *float64) param {
	return param{name: "rate", kind: pRate, float: f}
}

var (
	pBurst       = intP("burst", func(g *Guard) *int { return &g.Burst }, 1, maxCount)
	pQueue       = intP("queue", func(g *Guard) *int { return &g.Queue }, 0, bulkhead.MaxQueue)
	pMaxWait     = durP("max_wait", func(g *Guard) *time.Duration { return &g.MaxWait }, 0, time.Hour)
	pRetryAfter  = durP("retry_after", func(g *Guard) *time.Duration { return &g.RetryAfter }, 0, time.Hour)
	pMinLimit    = intP("min_limit", func(g *Guard) *int { return &g.MinLimit }, 1, bulkhead.MaxLimit)
	pMaxLimit    = intP("max_limit", func(g *Guard) *int { return &g.MaxLimit }, 1, bulkhead.MaxLimit)
	pInterval    = durP("interval", func(g *Guard) *time.Duration { return &g.Interval }, time.Millisecond, time.Hour)
	rateParam    = rateP(func(g *Guard) *float64 { return &g.Rate })
	rateRequired = []string{"rate"}
)

// burstOf is a tenth of a second's worth of rate r, at least 1 (as the
// preset sizes its buckets).
func burstOf(r float64) int { return preset.BurstOf(r) }

var guardTypes = map[GuardType]*guardType{
	TypeRateLimit: {
		params:   []param{rateParam, pBurst},
		required: rateRequired,
		fill: func(g *Guard, given map[string]bool) {
			if !given["burst"] {
				g.Burst = burstOf(g.Rate)
			}
		},
	},
	TypeKeyedRateLimit: {
		params: []param{rateParam, pBurst,
			intP("max_keys", func(g *Guard) *int { return &g.MaxKeys }, 1, maxCount),
			durP("idle_timeout", func(g *Guard) *time.Duration { return &g.IdleTimeout }, time.Second, 24*time.Hour),
		},
		required: rateRequired,
		fill: func(g *Guard, given map[string]bool) {
			if !given["burst"] {
				g.Burst = burstOf(g.Rate)
			}
			if !given["max_keys"] {
				g.MaxKeys = ratelimit.DefaultMaxKeys
			}
			if !given["idle_timeout"] {
				g.IdleTimeout = ratelimit.DefaultIdleTimeout
			}
		},
	},
	TypeBulkhead: {
		params:   []param{intP("limit", func(g *Guard) *int { return &g.Limit }, 1, bulkhead.MaxLimit), pQueue, pMaxWait, pRetryAfter},
		required: []string{"limit"},
		check: func(g *Guard) [][2]string {
			if g.MaxWait > 0 && g.Queue == 0 {
				return [][2]string{{"max_wait", "a bulkhead without a queue never waits: give queue or drop max_wait"}}
			}
			return nil
		},
	},
	TypeAdaptiveBulkhead: {
		params: []param{pMinLimit, pMaxLimit,
			intP("initial_limit", func(g *Guard) *int { return &g.InitialLimit }, 1, bulkhead.MaxLimit),
			durP("latency_ceiling", func(g *Guard) *time.Duration { return &g.LatencyCeiling }, 0, time.Hour),
			durP("probe_interval", func(g *Guard) *time.Duration { return &g.ProbeInterval }, time.Millisecond, 24*time.Hour),
			pQueue, pMaxWait, pRetryAfter},
		fill: func(g *Guard, given map[string]bool) {
			if !given["min_limit"] {
				g.MinLimit = 1
			}
			if !given["max_limit"] {
				g.MaxLimit = max(1000, g.MinLimit)
			}
			if !given["initial_limit"] {
				g.InitialLimit = min(max(20, g.MinLimit), g.MaxLimit)
			}
			if !given["probe_interval"] {
				g.ProbeInterval = 10 * time.Second
			}
		},
		check: func(g *Guard) [][2]string {
			var out [][2]string
			if g.MinLimit > g.MaxLimit {
				out = append(out, [2]string{"min_limit", fmt.Sprintf("must be <= max_limit (%d), got %d", g.MaxLimit, g.MinLimit)})
			} else if g.InitialLimit < g.MinLimit || g.InitialLimit > g.MaxLimit {
				out = append(out, [2]string{"initial_limit", fmt.Sprintf("must be between min_limit and max_limit (%d..%d), got %d", g.MinLimit, g.MaxLimit, g.InitialLimit)})
			}
			if g.MaxWait > 0 && g.Queue == 0 {
				out = append(out, [2]string{"max_wait", "a bulkhead without a queue never waits: give queue or drop max_wait"})
			}
			return out
		},
	},
	TypeLoadShed: {
		params: []param{
			{name: "policy", kind: pString, str: func(g *Guard) *string { return &g.ShedPolicy }, enum: []string{"aimd", "step"}},
			{name: "factor", kind: pFloat, float: func(g *Guard) *float64 { return &g.Factor }, lo: 0, hi: 1, open: true},
			// Above 0.05: loadshed.AIMD's increase aims that far below it.
			{name: "threshold", kind: pFloat, float: func(g *Guard) *float64 { return &g.Threshold }, lo: 0.05, hi: 1, open: true},
			pRetryAfter},
		fill: func(g *Guard, given map[string]bool) {
			if !given["policy"] {
				g.ShedPolicy = "aimd"
			}
			if g.ShedPolicy == "step" && !given["factor"] {
				g.Factor = 0.2
			}
			if g.ShedPolicy == "aimd" && !given["threshold"] {
				g.Threshold = 0.8
			}
			if !given["retry_after"] {
				g.RetryAfter = time.Second
			}
		},
		check: func(g *Guard) [][2]string {
			switch {
			case g.ShedPolicy == "aimd" && g.Factor != 0:
				return [][2]string{{"factor", "factor is the step policy's: give policy: step or drop factor"}}
			case g.ShedPolicy == "step" && g.Threshold != 0:
				return [][2]string{{"threshold", "threshold is the aimd policy's: give policy: aimd or drop threshold"}}
			}
			return nil
		},
	},
	TypeDeadline: {
		params: []param{{name: "margin", kind: pFloat, float: func(g *Guard) *float64 { return &g.Margin }, lo: 0, hi: 100}},
		fill: func(g *Guard, given map[string]bool) {
			if !given["margin"] {
				g.Margin = 1
			}
		},
	},
	TypeQueueDelay: {
		params: []param{durP("target", func(g *Guard) *time.Duration { return &g.Target }, time.Microsecond, time.Hour), pInterval},
		fill: func(g *Guard, given map[string]bool) {
			if !given["target"] {
				g.Target = 5 * time.Millisecond
			}
			if !given["interval"] {
				g.Interval = max(100*time.Millisecond, g.Target)
			}
		},
		check: func(g *Guard) [][2]string {
			if g.Target > g.Interval {
				return [][2]string{{"target", fmt.Sprintf("must be <= interval (%v), got %v", g.Interval, g.Target)}}
			}
			return nil
		},
	},
	TypeRunLimit: {
		params: []param{pMinLimit, pMaxLimit,
			intP("initial_limit", func(g *Guard) *int { return &g.InitialLimit }, 0, bulkhead.MaxLimit),
			durP("queue_target", func(g *Guard) *time.Duration { return &g.QueueTarget }, 0, time.Hour),
			pInterval,
			{name: "cpu", kind: pBool, bool: func(g *Guard) *bool { return &g.CPU }}},
		fill: func(g *Guard, given map[string]bool) {
			if !given["min_limit"] {
				g.MinLimit = 1
			}
			if !given["max_limit"] {
				g.MaxLimit = max(runlimit.DefaultCeiling, g.MinLimit)
			}
			if !given["interval"] {
				g.Interval = runlimit.DefaultInterval
			}
			if !given["cpu"] {
				g.CPU = true
			}
		},
		check: func(g *Guard) [][2]string {
			var out [][2]string
			if g.MinLimit > g.MaxLimit {
				out = append(out, [2]string{"min_limit", fmt.Sprintf("must be <= max_limit (%d), got %d", g.MaxLimit, g.MinLimit)})
			}
			if g.Shadow {
				out = append(out, [2]string{"shadow", "a runlimit's turns cannot be shadowed alone: shadow its rule instead"})
			}
			return out
		},
	},
}

// typeNames are the guard types, in the order the documentation lists
// them.
var typeNames = []string{string(TypeRateLimit), string(TypeKeyedRateLimit), string(TypeBulkhead), string(TypeAdaptiveBulkhead), string(TypeLoadShed), string(TypeDeadline), string(TypeQueueDelay), string(TypeRunLimit)}

// guard decodes one guard; it returns the node of its name (or of the
// guard) and whether it decoded.
func (d *decoder) guard(n *yaml.Node, path string) (Guard, *yaml.Node, bool) {
	var g Guard
	if !d.isMapping(n, path) {
		return g, n, false
	}
	// The type first: it says which fields are known.
	var typeN *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "type" {
			typeN = n.Content[i+1]
		}
	}
	if typeN == nil {
		d.errf(n, join(path, "type"), "a guard needs a type: one of %s", strings.Join(typeNames, ", "))
		return g, n, false
	}
	s, ok := d.str(typeN, join(path, "type"))
	if !ok {
		return g, n, false
	}
	gt := guardTypes[GuardType(s)]
	if gt == nil {
		d.errf(typeN, join(path, "type"), "unknown guard type %q (want one of %s)", s, strings.Join(typeNames, ", "))
		return g, n, false
	}
	g.Type = GuardType(s)
	known := []string{"type", "name", "shadow"}
	byName := map[string]param{}
	for _, p := range gt.params {
		known = append(known, p.name)
		byName[p.name] = p
	}
	nameAt := n
	given := map[string]bool{}
	nodes := map[string]*yaml.Node{}
	errsBefore := len(d.errs)
	seen := d.mapping(n, path, known, func(key string, v *yaml.Node, fp string) {
		nodes[key] = v
		switch key {
		case "type":
			return
		case "name":
			nameAt = v
			if s, ok := d.str(v, fp); ok {
				if s == "" {
					d.errf(v, fp, "must not be empty (leave it out for the type)")
				}
				g.Name = s
			}
			return
		case "shadow":
			g.Shadow, _ = d.boolean(v, fp)
			return
		}
		given[key] = d.param(byName[key], &g, v, fp)
	})
	if seen == nil {
		return g, n, false
	}
	for _, req := range gt.required {
		if nodes[req] == nil {
			d.errf(n, join(path, req), "a %s guard needs %s", g.Type, req)
		}
	}
	if g.Name == "" {
		g.Name = string(g.Type)
	}
	if len(d.errs) > errsBefore {
		return g, nameAt, true // cross-field checks would only echo the errors
	}
	if gt.fill != nil {
		gt.fill(&g, given)
	}
	if gt.check != nil {
		for _, e := range gt.check(&g) {
			at := nodes[e[0]]
			if at == nil {
				at = n
			}
			d.errf(at, join(path, e[0]), "%s", e[1])
		}
	}
	return g, nameAt, true
}

// param decodes the value v of parameter p into g, and reports whether
// it was valid.
func (d *decoder) param(p param, g *Guard, v *yaml.Node, path string) bool {
	var ok bool
	switch p.kind {
	case pInt:
		*p.int(g), ok = d.integer(v, path, int(p.lo), int(p.hi))
	case pFloat:
		*p.float(g), ok = d.number(v, path, p.lo, p.hi, p.open)
	case pRate:
		*p.float(g), ok = d.rate(v, path, true)
	case pDuration:
		*p.dur(g), ok = d.duration(v, path, time.Duration(p.lo), time.Duration(p.hi))
	case pBool:
		*p.bool(g), ok = d.boolean(v, path)
	case pString:
		var s string
		if s, ok = d.str(v, path); ok {
			if !contains(p.enum, s) {
				d.errf(v, path, "want one of %s, got %q", strings.Join(p.enum, ", "), s)
				return false
			}
			*p.str(g) = s
		}
	}
	return ok
}
