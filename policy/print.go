package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Format returns p as YAML with every default written out, fields in a
// fixed order and mappings sorted, so that two policies can be compared
// with diff; Decode(Format(p)) gives p back, and formatting that again
// gives the same bytes.
func (p *Policy) Format() []byte {
	root := mapNode()
	put(root, "code", str(codeName(p.Code)))
	put(root, "exempt", strList(p.Exempt))
	put(root, "preset", p.Preset.node())
	rules := &yaml.Node{Kind: yaml.SequenceNode}
	for _, r := range p.Rules {
		rules.Content = append(rules.Content, r.node())
	}
	put(root, "rules", rules)
	crit := mapNode()
	put(crit, "default", str(string(p.Criticality.Default)))
	cm := mapNode()
	for _, m := range p.Criticality.Methods {
		put(cm, m.Method, str(string(m.Class)))
	}
	put(crit, "methods", cm)
	put(root, "criticality", crit)
	if t := p.Tenants; t != nil {
		tn := mapNode()
		put(tn, "header", str(t.Header))
		put(tn, "default_weight", num(t.DefaultWeight))
		wn := mapNode()
		for _, w := range t.Weights {
			put(wn, w.Tenant, num(w.Weight))
		}
		put(tn, "weights", wn)
		put(root, "tenants", tn)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		panic(err) // a bug: the tree holds only scalars, lists and mappings
	}
	_ = enc.Close()
	return b.Bytes()
}

// Hash identifies the policy: the first 48 bits of the SHA-256 of its
// Format, so two policies with the same effective values have the same
// hash. It fits a float64 exactly, for a metric.
func (p *Policy) Hash() uint64 {
	sum := sha256.Sum256(p.Format())
	return binary.BigEndian.Uint64(sum[:8]) >> 16
}

// HashString is Hash as 12 hexadecimal digits.
func HashString(h uint64) string {
	s := strconv.FormatUint(h, 16)
	for len(s) < 12 {
		s = "0" + s
	}
	return s
}

func (ps Preset) node() *yaml.Node {
	n := mapNode()
	put(n, "enabled", boolean(ps.Enabled))
	put(n, "max_rate", rate(ps.MaxRate))
	put(n, "max_concurrency", integer(ps.MaxConcurrency))
	put(n, "client_rate", rate(ps.ClientRate))
	put(n, "cpu", boolean(ps.CPU))
	put(n, "memory", boolean(ps.Memory))
	put(n, "code", str(codeName(ps.Code)))
	put(n, "shadow", boolean(ps.Shadow))
	ms := mapNode()
	for _, m := range ps.Methods {
		mn := mapNode()
		put(mn, "exempt", boolean(m.Exempt))
		put(mn, "max_rate", rate(m.MaxRate))
		put(ms, m.Method, mn)
	}
	put(n, "methods", ms)
	return n
}

func (r Rule) node() *yaml.Node {
	n := mapNode()
	put(n, "name", str(r.Name))
	put(n, "methods", strList(r.Methods))
	key := string(r.Key.Kind)
	if r.Key.Kind == KeyHeader {
		key += ":" + r.Key.Header
	}
	put(n, "key", str(key))
	put(n, "code", str(codeName(r.Code)))
	put(n, "shadow", boolean(r.Shadow))
	gs := &yaml.Node{Kind: yaml.SequenceNode}
	for _, g := range r.Guards {
		gs.Content = append(gs.Content, g.node())
	}
	put(n, "guards", gs)
	return n
}

func (g Guard) node() *yaml.Node {
	n := mapNode()
	put(n, "type", str(string(g.Type)))
	put(n, "name", str(g.Name))
	put(n, "shadow", boolean(g.Shadow))
	gt := guardTypes[g.Type]
	if gt == nil {
		return n
	}
	for _, p := range gt.params {
		switch p.kind {
		case pInt:
			put(n, p.name, integer(*p.int(&g)))
		case pFloat:
			v := *p.float(&g)
			if v == 0 && p.open {
				continue // a parameter of the other variant (loadshed's factor, threshold)
			}
			put(n, p.name, num(v))
		case pRate:
			put(n, p.name, rate(*p.float(&g)))
		case pDuration:
			put(n, p.name, dur(*p.dur(&g)))
		case pBool:
			put(n, p.name, boolean(*p.bool(&g)))
		case pString:
			put(n, p.name, str(*p.str(&g)))
		}
	}
	return n
}

func mapNode() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode} }

func put(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, str(key), v)
}

func scalar(tag, v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v}
}

func str(s string) *yaml.Node        { return scalar("!!str", s) }
func boolean(b bool) *yaml.Node      { return scalar("!!bool", strconv.FormatBool(b)) }
func integer(i int) *yaml.Node       { return scalar("!!int", strconv.Itoa(i)) }
func dur(d time.Duration) *yaml.Node { return str(d.String()) }

// num writes a number so that it reads back as a number (1 stays an
// integer, 0.5 a float).
func num(f float64) *yaml.Node {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if f == float64(int64(f)) && f < 1e15 && f > -1e15 {
		return scalar("!!int", strconv.FormatInt(int64(f), 10))
	}
	return scalar("!!float", s)
}

// rate writes calls per second as N/s.
func rate(r float64) *yaml.Node {
	return str(strconv.FormatFloat(r, 'g', -1, 64) + "/s")
}

func strList(ss []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode}
	for _, s := range ss {
		n.Content = append(n.Content, str(s))
	}
	return n
}
