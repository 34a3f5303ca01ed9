package policy

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/runlimit"
)

// rule1 wraps guard YAML (indented for a list item under guards:) into a
// policy with one rule keyed by peer.
func rule1(guard string) string {
	return "rules:\n  - name: r\n    key: peer\n    guards:\n      - " + strings.ReplaceAll(strings.TrimSpace(guard), "\n", "\n        ") + "\n"
}

// errorCases are bad policies and the errors they must give, as
// "line:column: path: message fragment". Every field of the schema has at
// least one (TestEveryFieldHasAnErrorCase checks the guards' parameters).
var errorCases = []struct {
	name string
	give string
	want []string
}{
	// The document.
	{"empty", "", []string{"1:1: the file is empty"}},
	{"only a comment", "# nothing\n", []string{"1:1: the file is empty"}},
	{"not a mapping", "- a\n", []string{"1:1: want a mapping"}},
	{"syntax", "preset:\n  max_rate: [1/s\n", []string{"1:1: YAML syntax: did not find expected ',' or ']'"}},
	{"tab indentation", "preset:\n\tmax_rate: 1/s\n", []string{"2:2: YAML syntax:"}},
	{"second document", "preset: {}\n---\npreset: {}\n", []string{"2:1: a second YAML document"}},
	{"unknown top field", "preset: {}\nprest: {}\n", []string{`2:1: prest: unknown field "prest"`}},
	{"duplicate top field", "preset: {}\npreset: {}\n", []string{`2:1: preset: duplicate field "preset"`}},
	{"alias", "preset: &p {}\nrules: *p\n", []string{"2:8: rules: aliases (*name) are not supported"}},
	{"nothing guarded", "code: UNAVAILABLE\n", []string{"1:1: the policy guards nothing"}},
	{"disabled preset and no rules", "preset: {enabled: false}\n", []string{"1:1: the policy guards nothing"}},
	{"non-scalar key", "? [a]\n: 1\n", []string{"1:3: a key must be a name"}},

	// code, exempt
	{"code unknown", "code: INTERNAL\npreset: {}\n", []string{`1:7: code: want RESOURCE_EXHAUSTED or UNAVAILABLE, got "INTERNAL"`}},
	{"code number", "code: 8\npreset: {}\n", []string{"1:7: code: want a string, got an integer 8"}},
	{"exempt not a list", "exempt: /a.B/C\npreset: {}\n", []string{"1:9: exempt: want a list"}},
	{"exempt bad pattern", "exempt: [a.B/C]\npreset: {}\n", []string{`1:10: exempt[0]: want "/pkg.Service/Method" or "/pkg.Service/*", got "a.B/C"`}},
	{"exempt star", "exempt: ['*']\npreset: {}\n", []string{`1:10: exempt[0]: want "/pkg.Service/Method"`}},
	{"exempt twice", "exempt: [/a.B/C, /a.B/C]\npreset: {}\n", []string{`1:18: exempt[1]: method pattern "/a.B/C" is already taken by an exemption`}},
	{"exempt number", "exempt: [3]\npreset: {}\n", []string{"1:10: exempt[0]: want a string, got an integer 3"}},

	// preset
	{"preset not a mapping", "preset: yes\n", []string{"1:9: preset: want a mapping"}},
	{"preset unknown field", "preset:\n  rate: 1/s\n", []string{`2:3: preset.rate: unknown field "rate" (want one of enabled, max_rate,`}},
	{"preset enabled", "preset: {enabled: 1}\n", []string{"1:19: preset.enabled: want true or false, got an integer 1"}},
	{"preset max_rate unitless", "preset: {max_rate: 100}\n", []string{"1:20: preset.max_rate: want a rate such as 100/s or 6000/min, got an integer 100"}},
	{"preset max_rate unit", "preset: {max_rate: 100/day}\n", []string{`1:20: preset.max_rate: want a rate such as 100/s or 6000/min (units /s, /min, /h, /ms), got "100/day"`}},
	{"preset max_rate negative", "preset: {max_rate: -1/s}\n", []string{"1:20: preset.max_rate: must be a rate >= 0"}},
	{"preset max_rate huge", "preset: {max_rate: 2e9/s}\n", []string{"1:20: preset.max_rate: must be a rate >= 0 and at most 1e+09/s, got 2e9/s"}},
	{"preset max_rate NaN", "preset: {max_rate: NaN/s}\n", []string{"1:20: preset.max_rate: want a rate"}},
	{"preset max_concurrency", "preset: {max_concurrency: -1}\n", []string{"1:27: preset.max_concurrency: must be an integer between 0 and 1073741824, got -1"}},
	{"preset max_concurrency text", "preset: {max_concurrency: many}\n", []string{`1:27: preset.max_concurrency: want an integer, got "many"`}},
	{"preset client_rate", "preset: {client_rate: 5/fortnight}\n", []string{"1:23: preset.client_rate: want a rate"}},
	{"preset cpu", "preset: {cpu: on}\n", []string{`1:15: preset.cpu: want true or false, got "on"`}},
	{"preset memory", "preset: {memory: on}\n", []string{`1:18: preset.memory: want true or false, got "on"`}},
	{"preset code", "preset: {code: ABORTED}\n", []string{`1:16: preset.code: want RESOURCE_EXHAUSTED or UNAVAILABLE, got "ABORTED"`}},
	{"preset shadow", "preset: {shadow: maybe}\n", []string{`1:18: preset.shadow: want true or false`}},
	{"preset methods list", "preset: {methods: [a]}\n", []string{"1:19: preset.methods: want a mapping"}},
	{"preset method name", "preset:\n  methods:\n    /a.B/*: {exempt: true}\n", []string{`3:13: preset.methods["/a.B/*"]: want a full method name`}},
	{"preset method unknown field", "preset:\n  methods:\n    /a.B/C: {skip: true}\n", []string{`3:14: preset.methods["/a.B/C"].skip: unknown field "skip" (want one of exempt, max_rate)`}},
	{"preset method exempt", "preset:\n  methods:\n    /a.B/C: {exempt: 2}\n", []string{`3:22: preset.methods["/a.B/C"].exempt: want true or false`}},
	{"preset method max_rate", "preset:\n  methods:\n    /a.B/C: {max_rate: fast}\n", []string{`3:24: preset.methods["/a.B/C"].max_rate: want a rate`}},
	{"preset method exempt and rate", "preset:\n  methods:\n    /a.B/C: {exempt: true, max_rate: 5/s}\n", []string{`3:38: preset.methods["/a.B/C"].max_rate: an exempt method has no rate limit`}},
	{"preset method twice", "preset:\n  methods:\n    /a.B/C: {exempt: true}\n    /a.B/C: {max_rate: 1/s}\n", []string{`4:5: preset.methods["/a.B/C"]: duplicate key "/a.B/C"`}},
	{"preset method also exempt", "exempt: [/a.B/C]\npreset:\n  methods:\n    /a.B/C: {exempt: true}\n", []string{`4:22: preset.methods["/a.B/C"]: method pattern "/a.B/C" is already taken by an exemption`}},
	{"preset and a default rule", "preset: {}\nrules:\n  - guards: [{type: deadline}]\n", []string{`3:5: rules[0].methods[0]: method pattern "*" is already taken by the preset`}},

	// rules
	{"rules not a list", "rules: {a: 1}\n", []string{"1:8: rules: want a list"}},
	{"rule not a mapping", "rules: [3]\n", []string{"1:9: rules[0]: want a mapping"}},
	{"rule unknown field", "rules:\n  - guard: []\n", []string{`2:5: rules[0].guard: unknown field "guard"`, "2:5: rules[0].guards: a rule needs guards"}},
	{"rule name", "rules:\n  - name: 5\n    guards: [{type: deadline}]\n", []string{"2:11: rules[0].name: want a string, got an integer 5"}},
	{"rule name empty", "rules:\n  - name: ''\n    guards: [{type: deadline}]\n", []string{"2:11: rules[0].name: must not be empty"}},
	{"rule name twice", "rules:\n  - {name: a, methods: [/a.B/C], guards: [{type: deadline}]}\n  - {name: a, methods: [/a.B/D], guards: [{type: deadline}]}\n", []string{`3:12: rules[1].name: rule name "a" is already taken`}},
	{"rule methods not a list", "rules:\n  - methods: /a.B/C\n    guards: [{type: deadline}]\n", []string{"2:14: rules[0].methods: want a list"}},
	{"rule methods empty", "rules:\n  - methods: []\n    guards: [{type: deadline}]\n", []string{"2:14: rules[0].methods: must name at least one method pattern"}},
	{"rule method pattern", "rules:\n  - methods: [/a.B/C*]\n    guards: [{type: deadline}]\n", []string{`2:15: rules[0].methods[0]: want "/pkg.Service/Method", "/pkg.Service/*" or "*", got "/a.B/C*"`}},
	{"rule method taken", "rules:\n  - {methods: ['/a.B/*'], guards: [{type: deadline}]}\n  - {methods: ['/a.B/*'], guards: [{type: deadline}]}\n", []string{`3:16: rules[1].methods[0]: method pattern "/a.B/*" is already taken by rule "/a.B/*"`, `3:5: rules[1].name: rule name "/a.B/*" is already taken`}},
	{"rule method exempt", "rules:\n  - {methods: ['/grpc.health.v1.Health/*'], guards: [{type: deadline}]}\n", []string{`2:16: rules[0].methods[0]: method pattern "/grpc.health.v1.Health/*" is already taken by an exemption`}},
	{"rule key unknown", "rules:\n  - {key: ip, guards: [{type: deadline}]}\n", []string{`2:11: rules[0].key: want none, peer, tenant or header:NAME, got "ip"`}},
	{"rule key mapping", "rules:\n  - key: {header: x}\n    guards: [{type: deadline}]\n", []string{"2:10: rules[0].key: want a string, got a mapping"}},
	{"rule key header empty", "rules:\n  - {key: 'header:', guards: [{type: deadline}]}\n", []string{"2:11: rules[0].key: header must not be empty"}},
	{"rule key header chars", "rules:\n  - {key: 'header:x tenant', guards: [{type: deadline}]}\n", []string{`2:11: rules[0].key: header "x tenant": want letters`}},
	{"rule key grpc header", "rules:\n  - {key: 'header:grpc-timeout', guards: [{type: deadline}]}\n", []string{`2:11: rules[0].key: header "grpc-timeout": grpc- headers`}},
	{"rule key tenant without tenants", "rules:\n  - {key: tenant, guards: [{type: deadline}]}\n", []string{"2:11: rules[0].key: key tenant needs a tenants section"}},
	{"rule code", "rules:\n  - {code: 14, guards: [{type: deadline}]}\n", []string{"2:12: rules[0].code: want a string, got an integer 14"}},
	{"rule shadow", "rules:\n  - {shadow: 'yes', guards: [{type: deadline}]}\n", []string{`2:14: rules[0].shadow: want true or false, got "yes"`}},
	{"rule without guards", "rules:\n  - name: a\n", []string{"2:5: rules[0].guards: a rule needs guards"}},
	{"rule guards empty", "rules:\n  - guards: []\n", []string{"2:13: rules[0].guards: a rule takes 1 to 8 guards, got 0"}},
	{"rule guards too many", "rules:\n  - guards: [{type: deadline, name: a}, {type: deadline, name: b}, {type: deadline, name: c}, {type: deadline, name: d}, {type: deadline, name: e}, {type: deadline, name: f}, {type: deadline, name: g}, {type: deadline, name: h}, {type: deadline, name: i}]\n", []string{"2:13: rules[0].guards: a rule takes 1 to 8 guards, got 9"}},
	{"rule guards not a list", "rules:\n  - guards: {type: deadline}\n", []string{"2:13: rules[0].guards: want a list"}},

	// guards: common fields
	{"guard not a mapping", rule1("deadline"), []string{"5:9: rules[0].guards[0]: want a mapping"}},
	{"guard without type", rule1("name: x"), []string{"5:9: rules[0].guards[0].type: a guard needs a type"}},
	{"guard type unknown", rule1("type: breaker"), []string{`5:15: rules[0].guards[0].type: unknown guard type "breaker"`}},
	{"guard type number", rule1("type: 3"), []string{"5:15: rules[0].guards[0].type: want a string"}},
	{"guard unknown field", rule1("type: deadline\ntarget: 5ms"), []string{`6:9: rules[0].guards[0].target: unknown field "target" (want one of type, name, shadow, margin)`}},
	{"guard name", rule1("type: deadline\nname: [a]"), []string{"6:15: rules[0].guards[0].name: want a string, got a list"}},
	{"guard name empty", rule1("type: deadline\nname: ''"), []string{"6:15: rules[0].guards[0].name: must not be empty"}},
	{"guard name twice", "rules:\n  - guards: [{type: deadline}, {type: deadline}]\n", []string{`2:32: rules[0].guards[1].name: guard name "deadline" is already taken in this rule`}},
	{"guard shadow", rule1("type: deadline\nshadow: 1"), []string{"6:17: rules[0].guards[0].shadow: want true or false"}},
	{"keyed without key", "rules:\n  - guards: [{type: keyed_ratelimit, rate: 1/s}]\n", []string{"2:14: rules[0].guards[0].type: a keyed_ratelimit needs the rule's key"}},

	// guards: parameters, every one of every type
	{"ratelimit rate missing", rule1("type: ratelimit"), []string{"5:9: rules[0].guards[0].rate: a ratelimit guard needs rate"}},
	{"ratelimit rate", rule1("type: ratelimit\nrate: 0/s"), []string{"6:15: rules[0].guards[0].rate: must be a rate > 0"}},
	{"ratelimit burst", rule1("type: ratelimit\nrate: 1/s\nburst: 0"), []string{"7:16: rules[0].guards[0].burst: must be an integer between 1 and 1073741824, got 0"}},
	{"keyed_ratelimit rate", rule1("type: keyed_ratelimit\nrate: '1'"), []string{`6:15: rules[0].guards[0].rate: want a rate such as 100/s or 6000/min (units /s, /min, /h, /ms), got "1"`}},
	{"keyed_ratelimit burst", rule1("type: keyed_ratelimit\nrate: 1/s\nburst: 1.5"), []string{"7:16: rules[0].guards[0].burst: want an integer, got a number 1.5"}},
	{"keyed_ratelimit max_keys", rule1("type: keyed_ratelimit\nrate: 1/s\nmax_keys: 0"), []string{"7:19: rules[0].guards[0].max_keys: must be an integer between 1"}},
	{"keyed_ratelimit idle_timeout", rule1("type: keyed_ratelimit\nrate: 1/s\nidle_timeout: 10ms"), []string{"7:23: rules[0].guards[0].idle_timeout: must be a duration between 1s and 24h0m0s, got 10ms"}},
	{"bulkhead limit missing", rule1("type: bulkhead"), []string{"5:9: rules[0].guards[0].limit: a bulkhead guard needs limit"}},
	{"bulkhead limit", rule1("type: bulkhead\nlimit: 0"), []string{"6:16: rules[0].guards[0].limit: must be an integer between 1 and 1048576, got 0"}},
	{"bulkhead queue", rule1("type: bulkhead\nlimit: 1\nqueue: -1"), []string{"7:16: rules[0].guards[0].queue: must be an integer between 0"}},
	{"bulkhead max_wait", rule1("type: bulkhead\nlimit: 1\nqueue: 1\nmax_wait: 5"), []string{"8:19: rules[0].guards[0].max_wait: want a duration such as 250ms or 1m, got an integer 5"}},
	{"bulkhead max_wait without queue", rule1("type: bulkhead\nlimit: 1\nmax_wait: 5ms"), []string{"7:19: rules[0].guards[0].max_wait: a bulkhead without a queue never waits"}},
	{"bulkhead retry_after", rule1("type: bulkhead\nlimit: 1\nretry_after: -1s"), []string{"7:22: rules[0].guards[0].retry_after: must be a duration between 0s and 1h0m0s, got -1s"}},
	{"adaptive_bulkhead min_limit", rule1("type: adaptive_bulkhead\nmin_limit: 0"), []string{"6:20: rules[0].guards[0].min_limit: must be an integer between 1"}},
	{"adaptive_bulkhead max_limit", rule1("type: adaptive_bulkhead\nmax_limit: 2000000"), []string{"6:20: rules[0].guards[0].max_limit: must be an integer between 1 and 1048576"}},
	{"adaptive_bulkhead min above max", rule1("type: adaptive_bulkhead\nmin_limit: 10\nmax_limit: 5"), []string{"6:20: rules[0].guards[0].min_limit: must be <= max_limit (5), got 10"}},
	{"adaptive_bulkhead initial_limit", rule1("type: adaptive_bulkhead\nmax_limit: 10\ninitial_limit: 11"), []string{"7:24: rules[0].guards[0].initial_limit: must be between min_limit and max_limit (1..10), got 11"}},
	{"adaptive_bulkhead latency_ceiling", rule1("type: adaptive_bulkhead\nlatency_ceiling: soon"), []string{`6:26: rules[0].guards[0].latency_ceiling: want a duration such as 250ms or 1m, got "soon"`}},
	{"adaptive_bulkhead probe_interval", rule1("type: adaptive_bulkhead\nprobe_interval: 0"), []string{"6:25: rules[0].guards[0].probe_interval: must be a duration between 1ms and 24h0m0s, got 0"}},
	{"adaptive_bulkhead queue", rule1("type: adaptive_bulkhead\nqueue: x"), []string{`6:16: rules[0].guards[0].queue: want an integer, got "x"`}},
	{"adaptive_bulkhead max_wait", rule1("type: adaptive_bulkhead\nmax_wait: 1ms"), []string{"6:19: rules[0].guards[0].max_wait: a bulkhead without a queue never waits"}},
	{"adaptive_bulkhead retry_after", rule1("type: adaptive_bulkhead\nretry_after: 2h"), []string{"6:22: rules[0].guards[0].retry_after: must be a duration between 0s and 1h0m0s, got 2h"}},
	{"loadshed policy", rule1("type: loadshed\npolicy: pid"), []string{`6:17: rules[0].guards[0].policy: want one of aimd, step, got "pid"`}},
	{"loadshed factor", rule1("type: loadshed\npolicy: step\nfactor: 0"), []string{"7:17: rules[0].guards[0].factor: must be a number in (0, 1], got 0"}},
	{"loadshed factor with aimd", rule1("type: loadshed\nfactor: 0.5"), []string{"6:17: rules[0].guards[0].factor: factor is the step policy's"}},
	{"loadshed threshold", rule1("type: loadshed\nthreshold: 1.5"), []string{"6:20: rules[0].guards[0].threshold: must be a number in (0.05, 1], got 1.5"}},
	{"loadshed threshold at aimd's margin", rule1("type: loadshed\nthreshold: 0.05"), []string{"6:20: rules[0].guards[0].threshold: must be a number in (0.05, 1], got 0.05"}},
	{"loadshed threshold with step", rule1("type: loadshed\npolicy: step\nthreshold: 0.5"), []string{"7:20: rules[0].guards[0].threshold: threshold is the aimd policy's"}},
	{"loadshed retry_after", rule1("type: loadshed\nretry_after: '1'"), []string{`6:22: rules[0].guards[0].retry_after: want a duration such as 250ms or 1m, got "1"`}},
	{"deadline margin", rule1("type: deadline\nmargin: -0.5"), []string{"6:17: rules[0].guards[0].margin: must be a number in [0, 100], got -0.5"}},
	{"deadline margin inf", rule1("type: deadline\nmargin: .inf"), []string{"6:17: rules[0].guards[0].margin: must be a number in [0, 100], got .inf"}},
	{"queuedelay target", rule1("type: queuedelay\ntarget: 0s"), []string{"6:17: rules[0].guards[0].target: must be a duration between 1µs and 1h0m0s, got 0s"}},
	{"queuedelay interval", rule1("type: queuedelay\ninterval: 1h1m"), []string{"6:19: rules[0].guards[0].interval: must be a duration between 1ms and 1h0m0s, got 1h1m"}},
	{"queuedelay target above interval", rule1("type: queuedelay\ntarget: 200ms\ninterval: 100ms"), []string{"6:17: rules[0].guards[0].target: must be <= interval (100ms), got 200ms"}},
	{"runlimit min_limit", rule1("type: runlimit\nmin_limit: -1"), []string{"6:20: rules[0].guards[0].min_limit: must be an integer between 1"}},
	{"runlimit max_limit", rule1("type: runlimit\nmax_limit: 0"), []string{"6:20: rules[0].guards[0].max_limit: must be an integer between 1"}},
	{"runlimit min above max", rule1("type: runlimit\nmin_limit: 9\nmax_limit: 8"), []string{"6:20: rules[0].guards[0].min_limit: must be <= max_limit (8), got 9"}},
	{"runlimit initial_limit", rule1("type: runlimit\ninitial_limit: -3"), []string{"6:24: rules[0].guards[0].initial_limit: must be an integer between 0"}},
	{"runlimit queue_target", rule1("type: runlimit\nqueue_target: -1ms"), []string{"6:23: rules[0].guards[0].queue_target: must be a duration between 0s"}},
	{"runlimit interval", rule1("type: runlimit\ninterval: 0"), []string{"6:19: rules[0].guards[0].interval: must be a duration between 1ms"}},
	{"runlimit cpu", rule1("type: runlimit\ncpu: null"), []string{"6:14: rules[0].guards[0].cpu: want true or false, got nothing (null)"}},
	{"runlimit shadow", rule1("type: runlimit\nshadow: true"), []string{"6:17: rules[0].guards[0].shadow: a runlimit's turns cannot be shadowed alone"}},

	// criticality
	{"criticality not a mapping", "preset: {}\ncriticality: critical\n", []string{"2:14: criticality: want a mapping"}},
	{"criticality unknown field", "preset: {}\ncriticality: {classes: []}\n", []string{`2:15: criticality.classes: unknown field "classes" (want one of default, methods)`}},
	{"criticality default", "preset: {}\ncriticality: {default: high}\n", []string{`2:24: criticality.default: want one of critical_plus, critical, sheddable_plus, sheddable, got "high"`}},
	{"criticality methods", "preset: {}\ncriticality: {methods: [a]}\n", []string{"2:24: criticality.methods: want a mapping"}},
	{"criticality method pattern", "preset: {}\ncriticality:\n  methods: {'*': sheddable}\n", []string{`3:18: criticality.methods["*"]: want "/pkg.Service/Method" or "/pkg.Service/*", got "*"`}},
	{"criticality method twice", "preset: {}\ncriticality:\n  methods: {/a.B/C: sheddable, /a.B/C: critical}\n", []string{`3:32: criticality.methods["/a.B/C"]: duplicate key "/a.B/C"`}},
	{"criticality method class", "preset: {}\ncriticality:\n  methods: {/a.B/C: 3}\n", []string{`3:21: criticality.methods["/a.B/C"]: want a string, got an integer 3`}},

	// tenants
	{"tenants not a mapping", "preset: {}\ntenants: [a]\n", []string{"2:10: tenants: want a mapping"}},
	{"tenants unknown field", "preset: {}\ntenants: {header: x, weight: {}}\n", []string{`2:22: tenants.weight: unknown field "weight" (want one of header, default_weight, weights)`}},
	{"tenants header missing", "preset: {}\ntenants: {weights: {a: 1}}\n", []string{"2:10: tenants.header: tenants needs the header"}},
	{"tenants header", "preset: {}\ntenants: {header: 'x tenant'}\n", []string{`2:19: tenants.header: "x tenant": want letters`}},
	{"tenants default_weight", "preset: {}\ntenants: {header: x, default_weight: 0}\n", []string{"2:38: tenants.default_weight: must be a number in (0, 1e+06], got 0"}},
	{"tenants weights", "preset: {}\ntenants: {header: x, weights: [a]}\n", []string{"2:31: tenants.weights: want a mapping"}},
	{"tenants weight", "preset: {}\ntenants:\n  header: x\n  weights: {acme: -2, b: heavy}\n", []string{`4:19: tenants.weights["acme"]: must be a number in (0, 1e+06], got -2`, `4:26: tenants.weights["b"]: want a number, got "heavy"`}},
	{"tenants weight twice", "preset: {}\ntenants:\n  header: x\n  weights: {a.b: 1, a.b: 2}\n", []string{`4:21: tenants.weights["a.b"]: duplicate key "a.b"`}},
	{"tenants weight alias", "preset: {}\ntenants:\n  header: x\n  default_weight: &w 2\n  weights: {acme: *w}\n", []string{`5:19: tenants.weights["acme"]: aliases (*name) are not supported`}},
	{"tenants weight empty name", "preset: {}\ntenants:\n  header: x\n  weights: {'': 1}\n", []string{`4:17: tenants.weights[""]: a tenant name must not be empty`}},
}

var locPrefix = regexp.MustCompile(`^test\.yaml:\d+:\d+: `)

func TestDecodeErrors(t *testing.T) {
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Decode("test.yaml", []byte(tt.give))
			if err == nil {
				t.Fatalf("Decode(%q) = %+v, nil; want errors %q", tt.give, p, tt.want)
			}
			if p != nil {
				t.Errorf("Decode(%q) returned a policy with its errors", tt.give)
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("Decode(%q) error %T is not an Errors", tt.give, err)
			}
			for _, e := range es {
				if !locPrefix.MatchString(e.Error()) {
					t.Errorf("error %q lacks file:line:column", e)
				}
			}
			got := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(got, "test.yaml:"+w) {
					t.Errorf("Decode(%q) errors:\n%s\nwant one containing %q", tt.give, got, "test.yaml:"+w)
				}
			}
			if len(es) != len(tt.want) {
				t.Errorf("Decode(%q) gave %d errors, want %d:\n%s", tt.give, len(es), len(tt.want), got)
			}
		})
	}
}

// TestEveryFieldHasAnErrorCase: every parameter of every guard type, and
// every field of every section, has a case in errorCases.
func TestEveryFieldHasAnErrorCase(t *testing.T) {
	names := map[string]bool{}
	for _, tt := range errorCases {
		names[tt.name] = true
	}
	for typ, gt := range guardTypes {
		for _, p := range gt.params {
			found := false
			for n := range names {
				if strings.HasPrefix(n, string(typ)+" "+p.name) {
					found = true
				}
			}
			if !found {
				t.Errorf("no error case named %q", string(typ)+" "+p.name)
			}
		}
	}
	sections := map[string][]string{
		"code": nil, "exempt": nil,
		"preset": presetFields, "rule": ruleFields, "guard": {"type", "name", "shadow"},
		"criticality": {"default", "methods"}, "tenants": {"header", "default_weight", "weights"},
		"preset method": {"exempt", "max_rate"},
	}
	for sec, fields := range sections {
		if fields == nil {
			if !hasPrefix(names, sec+" ") {
				t.Errorf("no error case for %s", sec)
			}
			continue
		}
		for _, f := range fields {
			if !hasPrefix(names, sec+" "+f) {
				t.Errorf("no error case named %q", sec+" "+f)
			}
		}
	}
}

func hasPrefix(names map[string]bool, prefix string) bool {
	for n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// TestAllErrorsAtOnce: a file with many problems reports each of them, in
// the order of the file.
func TestAllErrorsAtOnce(t *testing.T) {
	give := `code: NOPE
preset:
  max_rate: 10
  cpuu: true
rules:
  - methods: [x]
    guards:
      - type: ratelimit
        rate: -1/s
        burst: 0
      - {type: keyed_ratelimit, rate: 5/s}
      - type: what
`
	_, err := Decode("bad.yaml", []byte(give))
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("Decode: err = %v, want Errors", err)
	}
	want := []string{
		"bad.yaml:1:7: code:",
		"bad.yaml:3:13: preset.max_rate:",
		"bad.yaml:4:3: preset.cpuu:",
		"bad.yaml:6:15: rules[0].methods[0]:",
		"bad.yaml:9:15: rules[0].guards[0].rate:",
		"bad.yaml:10:16: rules[0].guards[0].burst:",
		"bad.yaml:11:9: rules[0].guards[1].type:",
		"bad.yaml:12:15: rules[0].guards[2].type:",
	}
	if len(es) != len(want) {
		t.Fatalf("Decode gave %d errors, want %d:\n%v", len(es), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(es[i].Error(), w) {
			t.Errorf("error %d = %q, want prefix %q", i, es[i], w)
		}
	}
}

func TestDecodeDefaults(t *testing.T) {
	p, err := Decode("t.yaml", []byte(`
code: UNAVAILABLE
preset:
  max_rate: 6000/min
  methods:
    /a.B/C: {max_rate: 1/ms}
rules:
  - methods: [/x.Y/*]
    key: header:X-Tenant
    guards:
      - {type: ratelimit, rate: 25/s}
      - {type: keyed_ratelimit, rate: 1/h}
      - {type: adaptive_bulkhead, min_limit: 30}
      - {type: loadshed}
      - {type: queuedelay, target: 300ms}
      - {type: runlimit, min_limit: 2000}
tenants: {header: X-Tenant-ID}
`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Code != decide.Unavailable || p.Preset.Code != decide.Unavailable || p.Rules[0].Code != decide.Unavailable {
		t.Errorf("codes = %v, %v, %v; want UNAVAILABLE everywhere (the policy's default)", p.Code, p.Preset.Code, p.Rules[0].Code)
	}
	if !p.Preset.Enabled || !p.Preset.CPU || p.Preset.MaxRate != 100 {
		t.Errorf("preset = %+v, want enabled, cpu, max rate 100/s", p.Preset)
	}
	if m := p.Preset.Methods; len(m) != 1 || m[0].MaxRate != 1000 {
		t.Errorf("preset methods = %+v, want /a.B/C at 1000/s", m)
	}
	r := p.Rules[0]
	if r.Name != "/x.Y/*" || r.Key != (Key{Kind: KeyHeader, Header: "x-tenant"}) {
		t.Errorf("rule name, key = %q, %+v; want the first pattern and header x-tenant", r.Name, r.Key)
	}
	g := r.Guards
	checks := []struct {
		name      string
		got, want any
	}{
		{"ratelimit burst", g[0].Burst, 2},
		{"ratelimit name", g[0].Name, "ratelimit"},
		{"keyed burst", g[1].Burst, 1},
		{"keyed max keys", g[1].MaxKeys, 100_000},
		{"keyed idle", g[1].IdleTimeout, time.Minute},
		{"adaptive max", g[2].MaxLimit, 1000},
		{"adaptive initial", g[2].InitialLimit, 30},
		{"adaptive probe", g[2].ProbeInterval, 10 * time.Second},
		{"loadshed policy", g[3].ShedPolicy, "aimd"},
		{"loadshed threshold", g[3].Threshold, 0.8},
		{"loadshed retry", g[3].RetryAfter, time.Second},
		{"queuedelay interval", g[4].Interval, 300 * time.Millisecond},
		{"runlimit max", g[5].MaxLimit, 2000},
		{"runlimit cpu", g[5].CPU, true},
		{"runlimit interval", g[5].Interval, 100 * time.Millisecond},
		{"tenants header", p.Tenants.Header, "x-tenant-id"},
		{"tenants default weight", p.Tenants.DefaultWeight, 1.0},
		{"criticality default", p.Criticality.Default, Critical},
		{"exempt", fmt.Sprint(p.Exempt), "[/grpc.health.v1.Health/* /grpc.reflection.v1.ServerReflection/* /grpc.reflection.v1alpha.ServerReflection/*]"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestFormatRoundTrips: the example and the default policy decode, and
// Format → Decode → Format gives the same bytes.
func TestFormatRoundTrips(t *testing.T) {
	for name, src := range map[string][]byte{"example": Example, "default": DefaultPolicy().Format(), "small": []byte("rules: [{guards: [{type: ratelimit, rate: 1/h}]}]\ntenants: {header: t, weights: {b: 0.5, a: 2}}\n")} {
		p, err := Decode(name, src)
		if err != nil {
			t.Fatalf("Decode(%s): %v", name, err)
		}
		out := p.Format()
		p2, err := Decode(name+" printed", out)
		if err != nil {
			t.Fatalf("Decode(Format(%s)): %v\n%s", name, err, out)
		}
		if out2 := p2.Format(); string(out2) != string(out) {
			t.Errorf("Format(Decode(Format(%s))) differs:\n%s\n---\n%s", name, out, out2)
		}
		if p.Hash() != p2.Hash() {
			t.Errorf("%s: Hash changed across a round trip", name)
		}
	}
}

// TestHashFollowsEffectiveValues: the same policy written two ways has one
// hash; a changed value changes it.
func TestHashFollowsEffectiveValues(t *testing.T) {
	a := mustDecode(t, "preset: {max_rate: 6000/min}\n")
	b := mustDecode(t, "# same\npreset:\n  max_rate: 100/s\n  cpu: true\n")
	c := mustDecode(t, "preset: {max_rate: 101/s}\n")
	if a.Hash() != b.Hash() {
		t.Errorf("hashes of two spellings of one policy differ: %x, %x", a.Hash(), b.Hash())
	}
	if a.Hash() == c.Hash() {
		t.Errorf("hash did not change with max_rate")
	}
	if h := a.Hash(); h >= 1<<48 {
		t.Errorf("Hash() = %x, want 48 bits", h)
	}
}

func mustDecode(tb testing.TB, s string) *Policy {
	tb.Helper()
	p, err := Decode("test.yaml", []byte(s))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// TestDecodeTenantNameTooLong: a tenant weight whose name is longer than
// runlimit.MaxTenantLen is reported by Decode at its line and column, as
// an empty one is; it passed Decode (so `levee policy check` said ok) and
// failed the build, without a line and blamed on preset.max_concurrency.
// The longest name a run limit keeps decodes and builds.
func TestDecodeTenantNameTooLong(t *testing.T) {
	policy := func(tenant string) string {
		return "preset: {}\ntenants:\n  header: x-tenant-id\n  weights:\n    " + tenant + ": 2\n"
	}
	long := strings.Repeat("t", runlimit.MaxTenantLen+1)
	p, err := Decode("f.yaml", []byte(policy(long)))
	if err == nil {
		_, berr := build(p, p.Hash(), nil, nil, nil)
		t.Fatalf("Decode accepted a tenant name of %d bytes (> %d); the build then fails without a line: %v",
			len(long), runlimit.MaxTenantLen, berr)
	}
	var es Errors
	want := fmt.Sprintf(`tenants.weights[%q]`, long)
	if !errors.As(err, &es) || len(es) != 1 || es[0].Line != 5 || es[0].Path != want ||
		!strings.Contains(es[0].Msg, fmt.Sprintf("at most %d bytes, got %d", runlimit.MaxTenantLen, len(long))) {
		t.Fatalf("Decode error %v, want one at line 5, %s, saying the name is too long", err, want)
	}
	p = mustDecode(t, policy(long[1:]))
	b, err := build(p, p.Hash(), nil, nil, nil)
	if err != nil {
		t.Fatalf("a tenant name of %d bytes: build: %v", runlimit.MaxTenantLen, err)
	}
	b.closeUnused(nil)
}

// TestDecodeRuleNamedAsAPresetRule: with the preset on, its rules are
// named "default" and, for each method it gives a max_rate, the method's
// name; a rule of the file may take neither, since names are unique in a
// policy. Before, Decode let it, and Stats then showed two default/rate
// entries, the file's shadow refusals charged to the preset's guard too.
// With the preset off the names are free.
func TestDecodeRuleNamedAsAPresetRule(t *testing.T) {
	const rules = `
rules:
  - name: default
    methods: [/grpc.testing.TestService/*]
    guards:
      - {type: ratelimit, name: rate, rate: 1/h, burst: 1, shadow: true}
  - name: /a.B/C
    methods: [/a.B/D]
    guards: [{type: deadline}]
`
	_, err := Decode("test.yaml", []byte(`
preset:
  max_rate: 1000/s
  methods:
    /a.B/C: {max_rate: 10/s}
    /a.B/E: {exempt: true}
`+rules))
	var es Errors
	if !errors.As(err, &es) || len(es) != 2 ||
		es[0].Error() != `test.yaml:9:11: rules[0].name: rule name "default" is already taken by the preset's rule: names are unique` ||
		es[1].Error() != `test.yaml:13:11: rules[1].name: rule name "/a.B/C" is already taken by the preset's rule: names are unique` {
		t.Fatalf("Decode with the preset on = %v, want rules[0].name and rules[1].name taken by the preset's rules", err)
	}
	// An exempt method makes no rule: its name is free.
	mustDecode(t, "preset:\n  methods:\n    /a.B/E: {exempt: true}\nrules:\n  - {name: /a.B/E, methods: [/a.B/D], guards: [{type: deadline}]}\n")
	mustDecode(t, "preset: {enabled: false}\n"+rules)
	mustDecode(t, rules)
}
