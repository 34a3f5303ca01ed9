package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/internal/preset"
	"github.com/levee-go/levee/runlimit"
)

// MaxFileSize is the largest policy file Decode reads.
const MaxFileSize = 1 << 20

// ReadFile reads the policy file at path for Decode: at most one byte
// more than MaxFileSize, so that Decode refuses a larger file (or a
// device that never ends) without it being read whole.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxFileSize+1))
}

// Limits of numbers in a policy file.
const (
	maxRate  = 1e9     // calls per second
	maxCount = 1 << 30 // bursts, keys, queues, limits
)

// Decode decodes and validates the YAML policy in data, read from file
// (which only labels the errors), and fills in every default. It returns
// the policy, or nil and an Errors holding every problem at once, each
// with its file:line:column and field path. It never panics.
func Decode(file string, data []byte) (*Policy, error) {
	d := &decoder{file: file, lines: bytes.Split(data, []byte("\n"))}
	if len(data) > MaxFileSize {
		d.at(1, 1, "", "file is %d bytes, at most %d allowed", len(data), MaxFileSize)
		return nil, d.errs
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			d.at(1, 1, "", "the file is empty: want a policy (see levee policy example)")
		} else {
			d.syntax(err)
		}
		return nil, d.errs
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		d.errf(&next, "", "a second YAML document: want one policy per file")
	} else if !errors.Is(err, io.EOF) {
		d.syntax(err)
	}
	p := d.policy(&root)
	if len(d.errs) > 0 {
		d.errs.sort()
		return nil, d.errs
	}
	return p, nil
}

// DefaultPolicy returns the policy `levee serve` runs without a file: the
// preset with no bounds, as protect.New() builds it.
func DefaultPolicy() *Policy {
	p, err := Decode("default", []byte("preset: {}\n"))
	if err != nil {
		panic(err) // a bug: the default policy is valid
	}
	return p
}

type decoder struct {
	file  string
	lines [][]byte
	errs  Errors
}

func (d *decoder) at(line, col int, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Column: col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) errf(n *yaml.Node, path, format string, args ...any) {
	line, col := n.Line, n.Column
	if line < 1 {
		line = 1
	}
	if col < 1 {
		col = 1
	}
	d.at(line, col, path, format, args...)
}

var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntax reports a YAML syntax error. The YAML decoder gives its line
// only; the column is that of the line's first character that is not a
// space.
func (d *decoder) syntax(err error) {
	msg := err.Error()
	line := 1
	if m := syntaxLine.FindStringSubmatch(msg); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil && n >= 1 {
			line = n
		}
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	col := 1
	if line <= len(d.lines) {
		col += len(d.lines[line-1]) - len(bytes.TrimLeft(d.lines[line-1], " \t"))
	}
	d.at(line, col, "", "YAML syntax: %s", msg)
}

// kindName says what a node is, for "want X, got Y" messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	switch n.ShortTag() {
	case "!!null":
		return "nothing (null)"
	case "!!bool":
		return "a boolean " + n.Value
	case "!!int":
		return "an integer " + n.Value
	case "!!float":
		return "a number " + n.Value
	case "!!str":
		return strconv.Quote(n.Value)
	}
	return n.ShortTag() + " " + strconv.Quote(n.Value)
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// mapping walks the mapping n, calling on[key] with each value, and
// reports a node that is not a mapping, a duplicate key, an alias or an
// unknown key (naming the known ones). It returns the keys seen, or nil
// if n is not a mapping. A value's path is path.key.
func (d *decoder) mapping(n *yaml.Node, path string, known []string, on func(key string, v *yaml.Node, path string)) map[string]*yaml.Node {
	return d.walk(n, path, known, join, "field", on)
}

// named walks a mapping keyed by names the user chose (methods, tenants)
// as mapping does, with no list of known keys. A value's path is
// path["name"], so every error about it, including a duplicate or an
// alias, names it the same way, and a name holding a dot is not read as
// a nested field.
func (d *decoder) named(n *yaml.Node, path string, on func(name string, v *yaml.Node, path string)) map[string]*yaml.Node {
	return d.walk(n, path, nil, nameKey, "key", on)
}

func nameKey(path, name string) string { return fmt.Sprintf("%s[%q]", path, name) }

// walk is mapping and named: keyPath gives a value's path, what names a
// key in the duplicate error.
func (d *decoder) walk(n *yaml.Node, path string, known []string, keyPath func(path, key string) string, what string, on func(key string, v *yaml.Node, path string)) map[string]*yaml.Node {
	if !d.isMapping(n, path) {
		return nil
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errf(k, path, "a key must be a name, got %s", kindName(k))
			continue
		}
		key := k.Value
		fp := keyPath(path, key)
		if _, dup := seen[key]; dup {
			d.errf(k, fp, "duplicate %s %q", what, key)
			continue
		}
		if known != nil && !contains(known, key) {
			d.errf(k, fp, "unknown field %q (want one of %s)", key, strings.Join(known, ", "))
			continue
		}
		if v.Kind == yaml.AliasNode {
			d.errf(v, fp, "aliases (*name) are not supported: write the value")
			continue
		}
		seen[key] = v
		on(key, v, fp)
	}
	return seen
}

func (d *decoder) isMapping(n *yaml.Node, path string) bool {
	if n.Kind == yaml.MappingNode {
		return true
	}
	d.errf(n, path, "want a mapping (field: value), got %s", kindName(n))
	return false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// sequence walks the list n.
func (d *decoder) sequence(n *yaml.Node, path string, on func(i int, v *yaml.Node, path string)) bool {
	if n.Kind != yaml.SequenceNode {
		d.errf(n, path, "want a list, got %s", kindName(n))
		return false
	}
	for i, v := range n.Content {
		if v.Kind == yaml.AliasNode {
			d.errf(v, index(path, i), "aliases (*name) are not supported: write the value")
			continue
		}
		on(i, v, index(path, i))
	}
	return true
}

func isScalar(n *yaml.Node, tag string) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == tag
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if !isScalar(n, "!!str") {
		d.errf(n, path, "want a string, got %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	if !isScalar(n, "!!bool") {
		d.errf(n, path, "want true or false, got %s", kindName(n))
		return false, false
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		d.errf(n, path, "want true or false, got %s", kindName(n))
		return false, false
	}
	return b, true
}

// integer decodes an integer in [lo, hi].
func (d *decoder) integer(n *yaml.Node, path string, lo, hi int) (int, bool) {
	if !isScalar(n, "!!int") {
		d.errf(n, path, "want an integer, got %s", kindName(n))
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil || v < int64(lo) || v > int64(hi) {
		d.errf(n, path, "must be an integer between %d and %d, got %s", lo, hi, n.Value)
		return 0, false
	}
	return int(v), true
}

// number decodes a finite number in [lo, hi] (open at lo when open).
func (d *decoder) number(n *yaml.Node, path string, lo, hi float64, open bool) (float64, bool) {
	if !isScalar(n, "!!int") && !isScalar(n, "!!float") {
		d.errf(n, path, "want a number, got %s", kindName(n))
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi || (open && v == lo) {
		bound := "["
		if open {
			bound = "("
		}
		d.errf(n, path, "must be a number in %s%s, %s], got %s", bound, fmtFloat(lo), fmtFloat(hi), n.Value)
		return 0, false
	}
	return v, true
}

// duration decodes a duration such as 250ms in [lo, hi]; a bare 0 is
// also accepted.
func (d *decoder) duration(n *yaml.Node, path string, lo, hi time.Duration) (time.Duration, bool) {
	if isScalar(n, "!!int") && n.Value == "0" {
		if lo > 0 {
			d.errf(n, path, "must be a duration between %v and %v, got 0", lo, hi)
			return 0, false
		}
		return 0, true
	}
	if !isScalar(n, "!!str") {
		d.errf(n, path, "want a duration such as 250ms or 1m, got %s", kindName(n))
		return 0, false
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		d.errf(n, path, "want a duration such as 250ms or 1m, got %q", n.Value)
		return 0, false
	}
	if v < lo || v > hi {
		d.errf(n, path, "must be a duration between %v and %v, got %s", lo, hi, n.Value)
		return 0, false
	}
	return v, true
}

var rateUnits = map[string]float64{"s": 1, "sec": 1, "second": 1, "m": 1.0 / 60, "min": 1.0 / 60, "minute": 1.0 / 60, "h": 1.0 / 3600, "hour": 1.0 / 3600, "ms": 1000}

// rate decodes a rate such as 100/s or 6000/min into calls per second,
// >= 0 (> 0 when positive); a bare 0 is also accepted where 0 is.
func (d *decoder) rate(n *yaml.Node, path string, positive bool) (float64, bool) {
	want := "want a rate such as 100/s or 6000/min"
	if isScalar(n, "!!int") && n.Value == "0" && !positive {
		return 0, true
	}
	if !isScalar(n, "!!str") {
		d.errf(n, path, "%s, got %s", want, kindName(n))
		return 0, false
	}
	num, unit, ok := strings.Cut(n.Value, "/")
	per, known := rateUnits[strings.TrimSpace(unit)]
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if !ok || !known || err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		d.errf(n, path, "%s (units /s, /min, /h, /ms), got %q", want, n.Value)
		return 0, false
	}
	v *= per
	if v < 0 || (positive && v == 0) || v > maxRate {
		low := ">= 0"
		if positive {
			low = "> 0"
		}
		d.errf(n, path, "must be a rate %s and at most %v/s, got %s", low, fmtFloat(maxRate), n.Value)
		return 0, false
	}
	return v, true
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// codeNames are the refusal codes a policy may choose.
var codeNames = map[string]decide.Code{"RESOURCE_EXHAUSTED": decide.ResourceExhausted, "UNAVAILABLE": decide.Unavailable}

func codeName(c decide.Code) string {
	if c == decide.Unavailable {
		return "UNAVAILABLE"
	}
	return "RESOURCE_EXHAUSTED"
}

// code decodes a refusal code into *into, which it leaves as it was on
// error.
func (d *decoder) code(n *yaml.Node, path string, into *decide.Code) {
	s, ok := d.str(n, path)
	if !ok {
		return
	}
	c, ok := codeNames[s]
	if !ok {
		d.errf(n, path, "want RESOURCE_EXHAUSTED or UNAVAILABLE, got %q", s)
		return
	}
	*into = c
}

// Method patterns.
const (
	patternExact   = iota // /pkg.Service/Method
	patternService        // /pkg.Service/*
	patternAll            // *
	patternBad
)

func patternKind(p string) int {
	switch {
	case p == "*":
		return patternAll
	case !strings.HasPrefix(p, "/") || strings.Count(p, "/") != 2 || strings.HasSuffix(p, "/") || p[1] == '/':
		return patternBad
	case strings.HasSuffix(p, "/*"):
		if strings.Contains(strings.TrimSuffix(p, "/*"), "*") {
			return patternBad
		}
		return patternService
	case strings.Contains(p, "*"):
		return patternBad
	}
	return patternExact
}

// claims tracks which rule takes each method pattern, to report a
// pattern taken twice.
type claims map[string]string

func (d *decoder) claim(c claims, n *yaml.Node, path, pattern, by string) {
	if old, ok := c[pattern]; ok {
		d.errf(n, path, "method pattern %q is already taken by %s", pattern, old)
		return
	}
	c[pattern] = by
}

var topFields = []string{"code", "exempt", "preset", "rules", "criticality", "tenants"}

func (d *decoder) policy(root *yaml.Node) *Policy {
	n := root
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			d.errf(n, "", "the file is empty: want a policy (see levee policy example)")
			return nil
		}
		n = n.Content[0]
	}
	p := &Policy{Code: decide.ResourceExhausted, Exempt: append([]string(nil), decide.DefaultExempt...)}
	var presetN, rulesN, exemptN, critN, tenantsN *yaml.Node
	seen := d.mapping(n, "", topFields, func(key string, v *yaml.Node, path string) {
		switch key {
		case "code":
			d.code(v, path, &p.Code)
		case "exempt":
			exemptN = v
		case "preset":
			presetN = v
		case "rules":
			rulesN = v
		case "criticality":
			critN = v
		case "tenants":
			tenantsN = v
		}
	})
	if seen == nil {
		return nil
	}
	taken := claims{}
	if exemptN != nil {
		p.Exempt = []string{}
		d.sequence(exemptN, "exempt", func(i int, v *yaml.Node, path string) {
			s, ok := d.str(v, path)
			if !ok {
				return
			}
			if k := patternKind(s); k == patternBad || k == patternAll {
				d.errf(v, path, "want \"/pkg.Service/Method\" or \"/pkg.Service/*\", got %q", s)
				return
			}
			d.claim(taken, v, path, s, "an exemption")
			p.Exempt = append(p.Exempt, s)
		})
	} else {
		for _, s := range p.Exempt {
			taken[s] = "an exemption"
		}
	}
	if tenantsN != nil {
		p.Tenants = d.tenants(tenantsN, "tenants")
	}
	if presetN != nil {
		d.preset(presetN, "preset", p, taken)
	} else {
		p.Preset = Preset{CPU: true, Memory: true, Code: p.Code}
	}
	if rulesN != nil {
		d.rules(rulesN, "rules", p, taken, presetRuleNames(p.Preset))
	}
	p.Criticality = Criticality{Default: Critical}
	if critN != nil {
		d.criticality(critN, "criticality", &p.Criticality)
	}
	if !p.Preset.Enabled && len(p.Rules) == 0 && len(d.errs) == 0 {
		d.errf(n, "", "the policy guards nothing: want a preset section, rules, or both")
	}
	return p
}

var presetFields = []string{"enabled", "max_rate", "max_concurrency", "client_rate", "cpu", "memory", "code", "shadow", "methods"}

func (d *decoder) preset(n *yaml.Node, path string, p *Policy, taken claims) {
	ps := Preset{Enabled: true, CPU: true, Memory: true, Code: p.Code}
	var methodsN *yaml.Node
	d.mapping(n, path, presetFields, func(key string, v *yaml.Node, fp string) {
		switch key {
		case "enabled":
			ps.Enabled, _ = d.boolean(v, fp)
		case "max_rate":
			ps.MaxRate, _ = d.rate(v, fp, false)
		case "max_concurrency":
			ps.MaxConcurrency, _ = d.integer(v, fp, 0, maxCount)
		case "client_rate":
			ps.ClientRate, _ = d.rate(v, fp, false)
		case "cpu":
			ps.CPU, _ = d.boolean(v, fp)
		case "memory":
			ps.Memory, _ = d.boolean(v, fp)
		case "code":
			d.code(v, fp, &ps.Code)
		case "shadow":
			ps.Shadow, _ = d.boolean(v, fp)
		case "methods":
			methodsN = v
		}
	})
	if ps.Enabled {
		taken["*"] = "the preset"
	}
	if methodsN != nil {
		mp := join(path, "methods")
		d.named(methodsN, mp, func(name string, v *yaml.Node, fp string) {
			if patternKind(name) != patternExact {
				d.errf(v, fp, "want a full method name \"/pkg.Service/Method\", got %q", name)
				return
			}
			m := MethodOverride{Method: name}
			var exemptN, rateN *yaml.Node
			d.mapping(v, fp, []string{"exempt", "max_rate"}, func(key string, v *yaml.Node, kp string) {
				switch key {
				case "exempt":
					m.Exempt, _ = d.boolean(v, kp)
					exemptN = v
				case "max_rate":
					m.MaxRate, _ = d.rate(v, kp, false)
					rateN = v
				}
			})
			if m.Exempt && m.MaxRate > 0 {
				d.errf(rateN, join(fp, "max_rate"), "an exempt method has no rate limit: drop max_rate or exempt")
			}
			if ps.Enabled && (m.Exempt || m.MaxRate > 0) {
				at := exemptN
				if at == nil {
					at = rateN
				}
				d.claim(taken, at, fp, name, "the preset's override")
			}
			ps.Methods = append(ps.Methods, m)
		})
		sort.Slice(ps.Methods, func(i, j int) bool { return ps.Methods[i].Method < ps.Methods[j].Method })
	}
	p.Preset = ps
}

// presetRuleNames returns the names of the rules ps builds, as
// preset.Build names them: none when it is off, else its rule for every
// method (preset.RuleDefault) and one for each method given a rate of its
// own, by the method's name.
func presetRuleNames(ps Preset) []string {
	if !ps.Enabled {
		return nil
	}
	names := []string{preset.RuleDefault}
	for _, m := range ps.Methods {
		if !m.Exempt && m.MaxRate > 0 {
			names = append(names, m.Method)
		}
	}
	return names
}

var ruleFields = []string{"name", "methods", "key", "code", "shadow", "guards"}

// rules decodes the rules section; reserved are the names of the preset's
// rules, which no rule may take.
func (d *decoder) rules(n *yaml.Node, path string, p *Policy, taken claims, reserved []string) {
	names := map[string]string{} // by what a name is taken: "" for a rule of the section
	for _, name := range reserved {
		names[name] = "the preset's rule"
	}
	d.sequence(n, path, func(i int, v *yaml.Node, rp string) {
		r := Rule{Code: p.Code}
		var guardsN, nameN *yaml.Node
		var methodsN []*yaml.Node
		seen := d.mapping(v, rp, ruleFields, func(key string, v *yaml.Node, fp string) {
			switch key {
			case "name":
				nameN = v
				if s, ok := d.str(v, fp); ok {
					if s == "" {
						d.errf(v, fp, "must not be empty (leave it out for the first method pattern)")
					}
					r.Name = s
				}
			case "methods":
				r.Methods = []string{}
				d.sequence(v, fp, func(j int, m *yaml.Node, mp string) {
					s, ok := d.str(m, mp)
					if !ok {
						return
					}
					if patternKind(s) == patternBad {
						d.errf(m, mp, "want \"/pkg.Service/Method\", \"/pkg.Service/*\" or \"*\", got %q", s)
						return
					}
					r.Methods = append(r.Methods, s)
					methodsN = append(methodsN, m)
				})
				if len(v.Content) == 0 && v.Kind == yaml.SequenceNode {
					d.errf(v, fp, "must name at least one method pattern (leave it out for \"*\")")
				}
			case "key":
				r.Key = d.key(v, fp, p.Tenants)
			case "code":
				d.code(v, fp, &r.Code)
			case "shadow":
				r.Shadow, _ = d.boolean(v, fp)
			case "guards":
				guardsN = v
			}
		})
		if seen == nil {
			return
		}
		if r.Methods == nil {
			r.Methods = []string{"*"}
			methodsN = []*yaml.Node{v}
		}
		if r.Key.Kind == "" {
			r.Key.Kind = KeyNone
		}
		if r.Name == "" && len(r.Methods) > 0 {
			r.Name = r.Methods[0]
		}
		if r.Name != "" {
			at := nameN
			if at == nil {
				at = v
			}
			if by, ok := names[r.Name]; ok && by == "" {
				d.errf(at, join(rp, "name"), "rule name %q is already taken: names are unique", r.Name)
			} else if ok {
				d.errf(at, join(rp, "name"), "rule name %q is already taken by %s: names are unique", r.Name, by)
			} else {
				names[r.Name] = ""
			}
		}
		for j, m := range r.Methods {
			if j < len(methodsN) {
				d.claim(taken, methodsN[j], index(join(rp, "methods"), j), m, fmt.Sprintf("rule %q", r.Name))
			}
		}
		if guardsN == nil {
			d.errf(v, join(rp, "guards"), "a rule needs guards (1 to %d)", admission.MaxGuards)
			return
		}
		gp := join(rp, "guards")
		gnames := map[string]bool{}
		d.sequence(guardsN, gp, func(j int, gv *yaml.Node, fp string) {
			g, nameAt, ok := d.guard(gv, fp)
			if !ok {
				return
			}
			if gnames[g.Name] {
				d.errf(nameAt, join(fp, "name"), "guard name %q is already taken in this rule", g.Name)
			}
			gnames[g.Name] = true
			if g.Type == TypeKeyedRateLimit && r.Key.Kind == KeyNone {
				d.errf(gv, join(fp, "type"), "a keyed_ratelimit needs the rule's key (key: peer, tenant or header:NAME)")
			}
			r.Guards = append(r.Guards, g)
		})
		if guardsN.Kind == yaml.SequenceNode && (len(guardsN.Content) == 0 || len(guardsN.Content) > admission.MaxGuards) {
			d.errf(guardsN, gp, "a rule takes 1 to %d guards, got %d", admission.MaxGuards, len(guardsN.Content))
		}
		p.Rules = append(p.Rules, r)
	})
}

// key decodes a rule's key: none, peer, tenant or header:NAME.
func (d *decoder) key(n *yaml.Node, path string, t *Tenants) Key {
	want := "want none, peer, tenant or header:NAME"
	s, ok := d.str(n, path)
	if !ok {
		return Key{}
	}
	switch {
	case s == string(KeyNone):
		return Key{Kind: KeyNone}
	case s == string(KeyPeer):
		return Key{Kind: KeyPeer}
	case s == string(KeyTenant):
		if t == nil {
			d.errf(n, path, "key tenant needs a tenants section naming the header")
			return Key{}
		}
		return Key{Kind: KeyTenant, Header: t.Header}
	case strings.HasPrefix(s, "header:"):
		h := strings.ToLower(strings.TrimSpace(strings.TrimPrefix(s, "header:")))
		if msg := checkHeader(h); msg != "" {
			d.errf(n, path, "header %s", msg)
			return Key{}
		}
		return Key{Kind: KeyHeader, Header: h}
	}
	d.errf(n, path, "%s, got %q", want, s)
	return Key{}
}

// checkHeader returns why h is not a metadata key a policy may name, or "".
func checkHeader(h string) string {
	if h == "" {
		return "must not be empty"
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Sprintf("%q: want letters, digits, '-', '_' or '.'", h)
		}
	}
	if strings.HasPrefix(h, "grpc-") || strings.HasSuffix(h, "-bin") {
		return fmt.Sprintf("%q: grpc- headers and binary (-bin) headers cannot be keys", h)
	}
	return ""
}

var classes = []string{string(CriticalPlus), string(Critical), string(SheddablePlus), string(Sheddable)}

func (d *decoder) class(n *yaml.Node, path string) (Class, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return "", false
	}
	if !contains(classes, s) {
		d.errf(n, path, "want one of %s, got %q", strings.Join(classes, ", "), s)
		return "", false
	}
	return Class(s), true
}

func (d *decoder) criticality(n *yaml.Node, path string, c *Criticality) {
	d.mapping(n, path, []string{"default", "methods"}, func(key string, v *yaml.Node, fp string) {
		switch key {
		case "default":
			if cl, ok := d.class(v, fp); ok {
				c.Default = cl
			}
		case "methods":
			d.named(v, fp, func(name string, v *yaml.Node, fp string) {
				if k := patternKind(name); k != patternExact && k != patternService {
					d.errf(v, fp, "want \"/pkg.Service/Method\" or \"/pkg.Service/*\", got %q", name)
					return
				}
				if cl, ok := d.class(v, fp); ok {
					c.Methods = append(c.Methods, MethodClass{Method: name, Class: cl})
				}
			})
			sort.Slice(c.Methods, func(i, j int) bool { return c.Methods[i].Method < c.Methods[j].Method })
		}
	})
}

func (d *decoder) tenants(n *yaml.Node, path string) *Tenants {
	t := &Tenants{DefaultWeight: 1}
	seen := d.mapping(n, path, []string{"header", "default_weight", "weights"}, func(key string, v *yaml.Node, fp string) {
		switch key {
		case "header":
			if s, ok := d.str(v, fp); ok {
				h := strings.ToLower(s)
				if msg := checkHeader(h); msg != "" {
					d.errf(v, fp, "%s", msg)
					return
				}
				t.Header = h
			}
		case "default_weight":
			t.DefaultWeight, _ = d.number(v, fp, 0, 1e6, true)
		case "weights":
			d.named(v, fp, func(tenant string, v *yaml.Node, fp string) {
				if tenant == "" {
					d.errf(v, fp, "a tenant name must not be empty")
					return
				}
				if len(tenant) > runlimit.MaxTenantLen {
					d.errf(v, fp, "a tenant name is at most %d bytes, got %d", runlimit.MaxTenantLen, len(tenant))
					return
				}
				if w, ok := d.number(v, fp, 0, 1e6, true); ok {
					t.Weights = append(t.Weights, TenantWeight{Tenant: tenant, Weight: w})
				}
			})
			sort.Slice(t.Weights, func(i, j int) bool { return t.Weights[i].Tenant < t.Weights[j].Tenant })
		}
	})
	if seen != nil && seen["header"] == nil {
		d.errf(n, join(path, "header"), "tenants needs the header naming a call's tenant (such as x-tenant-id)")
	}
	return t
}
