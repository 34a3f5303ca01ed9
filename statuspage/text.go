package statuspage

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"
)

// WriteText writes s for a person to read: the form ServeHTTP serves by
// default and `levee status` prints. Method names and tenants, which a
// client chooses, are quoted.
func WriteText(w io.Writer, s Status) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	p("levee status at %s\n", s.Time.UTC().Format(time.RFC3339Nano))
	for _, rl := range s.RunLimits {
		p("\nrun limit %s: limit %d (bounds %d-%d), running %d, waiting %d, tenants %d\n",
			quote(rl.Guard), rl.Limit, rl.Floor, rl.Ceiling, rl.Running, rl.Waiting, rl.Tenants)
		if len(rl.Flows) > 0 {
			p("  flow\tservice ms\tbaseline ms\tqueue target ms\twaiting\n")
			for _, f := range rl.Flows {
				p("  %s\t%s\t%s\t%s\t%d\n", quote(f.Name), num(f.ServiceTimeMS), num(f.BaselineMS), num(f.QueueTargetMS), f.Waiting)
				for _, ln := range f.Lanes {
					p("    lane tenant=%s class=%s\t\t\t\t%d\n", quote(ln.Tenant), ln.Class, ln.Waiting)
				}
			}
			if rl.FlowsLeft > 0 {
				p("  (%d more flows)\n", rl.FlowsLeft)
			}
		}
		if len(rl.Moves) > 0 {
			p("  learner's last moves, newest first:\n")
			for _, m := range rl.Moves {
				probe := ""
				if m.Probe != "" {
					probe = " (" + m.Probe + ")"
				}
				p("    %s\t%d -> %d\t%s%s\n", clock(m.Time), m.From, m.To, m.Cause, probe)
			}
		}
	}
	// section writes a titled table of n rows (header "": none), or
	// "none".
	section := func(title, header string, n int, row func(i int)) {
		p("\n%s:\n", title)
		if n == 0 {
			p("  none\n")
			return
		}
		if header != "" {
			p("  %s\n", header)
		}
		for i := range n {
			row(i)
		}
	}
	section("signals of overload", "source\tsignal\tvalue\tthreshold\tunit\tevidence", len(s.Signals), func(i int) {
		sg := s.Signals[i]
		p("  %s\t%s\t%s\t%s\t%s\t%s\n", quote(sg.Source), sg.Name, num(sg.Value), num(sg.Threshold), sg.Unit, yes(sg.Evidence))
	})
	section("refusals since start, by guard, reason and evidence", "guard\treason\tevidence\tcount", len(s.RefusalCounts), func(i int) {
		c := s.RefusalCounts[i]
		p("  %s\t%s\t%s\t%d\n", quote(c.Guard), c.Reason, c.Evidence, c.Count)
	})
	section("last refusals (sampled), newest first", "", len(s.Refusals), func(i int) {
		r := s.Refusals[i]
		reason := r.Reason
		if r.Cause != "" {
			reason += " (cause " + r.Cause + ")"
		}
		p("  %s\t%s\t%s\tguard=%s evidence=%s value=%s threshold=%s\tmethod=%s class=%s tenant=%s retry_after_ms=%s\n",
			clock(r.Time), r.Code, reason, quote(r.Guard), r.Evidence, num(r.Value), num(r.Threshold),
			quote(r.Method), r.Class, quote(r.Tenant), num(r.RetryAfterMS))
	})
	return tw.Flush()
}

// quote returns s as it is if it is plain (printable ASCII without
// spaces, quotes or backslashes), else Go-quoted: a client chooses method
// names and tenants, and a terminal must not run what they hold.
func quote(s string) string {
	if s == "" {
		return `""`
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return strconv.Quote(s)
		}
	}
	return s
}

// num formats v in few digits: four significant ones, or whole units
// from a thousand on.
func num(v float64) string {
	if math.Abs(v) >= 1000 && !math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// clock is t's time of day, to the millisecond, in UTC.
func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("15:04:05.000")
}
