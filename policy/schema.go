package policy

import (
	"time"

	"github.com/levee-go/levee/decide"
)

// Policy is a decoded, validated policy file with every default filled
// in. Decode returns one; Build turns it into guards. The zero Policy is
// not valid (it enforces nothing); DefaultPolicy is what `levee serve`
// runs without a file. A Policy is a plain value: it is not safe to
// change while another goroutine reads it.
type Policy struct {
	// Code is the refusal status of the preset and of every rule that
	// gives none: decide.ResourceExhausted (the default) or
	// decide.Unavailable. YAML: code.
	Code decide.Code
	// Exempt are the method patterns never guarded. Default
	// decide.DefaultExempt (health checks and reflection); an empty
	// list guards every method. YAML: exempt.
	Exempt []string
	// Preset is the library's preset (package protect) as the default rule
	// "*". YAML: preset.
	Preset Preset
	// Rules are rules of guards by method and service; see Rule. YAML:
	// rules.
	Rules []Rule
	// Criticality is each method's default criticality class. YAML:
	// criticality.
	Criticality Criticality
	// Tenants names the tenant header and the tenants' weights; nil when
	// the file has no tenants section. YAML: tenants.
	Tenants *Tenants
}

// Preset is the preset's part of a policy: the protection protect.New
// builds, learned, with optional bounds. Zero numbers mean "no bound"; the
// zero Preset is off. A plain value, like every type of a Policy: safe to
// read from several goroutines, not to change while one reads it.
type Preset struct {
	// Enabled turns the preset on. Default: true when the file has a
	// preset section, false otherwise. YAML: enabled.
	Enabled bool
	// MaxRate caps the guarded calls per second (0: no cap). YAML:
	// max_rate, a rate such as 500/s.
	MaxRate float64
	// MaxConcurrency caps the learned run limit (0: runlimit's ceiling).
	// YAML: max_concurrency.
	MaxConcurrency int
	// ClientRate caps each client's calls per second, by peer address (0:
	// no cap). YAML: client_rate.
	ClientRate float64
	// CPU turns the CPU signal on. Default true. YAML: cpu.
	CPU bool
	// Memory turns the memory guard on for a process with a memory limit
	// (protect.New's; see package memshed). Default true. YAML: memory.
	Memory bool
	// Code is the refusal status; default Policy.Code. YAML: code.
	Code decide.Code
	// Shadow counts the preset's refusals without refusing. YAML: shadow.
	Shadow bool
	// Methods override the preset per full method name, sorted by method.
	// YAML: methods, a mapping from method name to override.
	Methods []MethodOverride
}

// MethodOverride overrides the preset for one method (protect.Method).
// The zero value overrides nothing. A plain value, with Policy's rule for
// concurrent use: read it from any goroutine, change it from none while
// it is read.
type MethodOverride struct {
	// Method is the full method name, "/pkg.Service/Method".
	Method string
	// Exempt leaves the method unguarded. YAML: exempt.
	Exempt bool
	// MaxRate caps the method's calls per second (0: no cap of its own).
	// YAML: max_rate.
	MaxRate float64
}

// Rule is a rule of guards (decide.Rule). Decode fills every default;
// the zero Rule is not valid (it has no guards). A plain value: Build
// copies what it needs, and like Policy it may be read concurrently but
// not changed while read.
type Rule struct {
	// Name labels the rule in metrics; default: its first method pattern.
	// Names are unique in a policy, the preset's rules' included: with the
	// preset on, "default" and the name of each method it gives a max_rate
	// are its rules'. YAML: name.
	Name string
	// Methods are the patterns the rule governs: "/pkg.Service/Method",
	// "/pkg.Service/*" or "*". Default ["*"]. YAML: methods.
	Methods []string
	// Key is what per-key guards count by. YAML: key.
	Key Key
	// Code is the refusal status; default Policy.Code. YAML: code.
	Code decide.Code
	// Shadow counts every refusal of the rule without refusing. YAML:
	// shadow.
	Shadow bool
	// Guards are the rule's guards, 1 to admission.MaxGuards. YAML:
	// guards.
	Guards []Guard
}

// KeyKind is what a rule keys its calls by. The zero KeyKind, "", is not
// one of the kinds: Decode writes KeyNone in its place, and Build reads
// it as KeyNone.
type KeyKind string

// Kinds of Key. YAML: key: none | peer | tenant | header:NAME.
const (
	KeyNone   KeyKind = "none"   // no key
	KeyPeer   KeyKind = "peer"   // the client's IP address
	KeyHeader KeyKind = "header" // a metadata header, Key.Header
	KeyTenant KeyKind = "tenant" // the tenants section's header
)

// Key is the key of a rule's per-key guards, a plain value (safe to read
// concurrently, like every type of a Policy). The zero Key keys by
// nothing, as KeyNone does.
type Key struct {
	Kind   KeyKind
	Header string // the header of KeyHeader (and of KeyTenant, filled in from Tenants), lower case
}

// GuardType names a kind of guard. The zero GuardType, "", names none:
// Decode reports a guard without a type, and Build refuses it.
type GuardType string

// Guard types. YAML: type.
const (
	TypeRateLimit        GuardType = "ratelimit"         // ratelimit.NewGuard
	TypeKeyedRateLimit   GuardType = "keyed_ratelimit"   // ratelimit.NewKeyedGuard, by the rule's key
	TypeBulkhead         GuardType = "bulkhead"          // bulkhead.NewGuard over a fixed limit
	TypeAdaptiveBulkhead GuardType = "adaptive_bulkhead" // bulkhead.NewAdaptiveGuard
	TypeLoadShed         GuardType = "loadshed"          // loadshed.NewGuard following the CPU signal
	TypeDeadline         GuardType = "deadline"          // deadline.New
	TypeQueueDelay       GuardType = "queuedelay"        // queuedelay.New (CoDel)
	TypeRunLimit         GuardType = "runlimit"          // runlimit.NewGuard, a learned run limit
)

// Guard is one guard of a rule: its type, its name and its parameters.
// Only the parameters of its type are set (see the table in the package
// documentation); the others are zero. Decode fills every default; the
// zero Guard is not valid (it has no type). A plain value, which Build
// reads by value; read it from several goroutines, but do not change it
// while one reads it.
type Guard struct {
	// Type is the kind of guard; required. YAML: type.
	Type GuardType
	// Name labels the guard; default its type. Unique within a rule.
	// YAML: name.
	Name string
	// Shadow counts the guard's refusals without refusing (not for
	// runlimit, whose turns cannot be shadowed: shadow its rule). YAML:
	// shadow.
	Shadow bool

	Rate           float64       // ratelimit, keyed_ratelimit: tokens per second (> 0)
	Burst          int           // ratelimit, keyed_ratelimit: default a tenth of a second's worth, at least 1
	MaxKeys        int           // keyed_ratelimit: default ratelimit.DefaultMaxKeys
	IdleTimeout    time.Duration // keyed_ratelimit: default ratelimit.DefaultIdleTimeout
	Limit          int           // bulkhead: calls in flight (>= 1)
	Queue          int           // bulkhead, adaptive_bulkhead: calls that may wait for a slot
	MaxWait        time.Duration // bulkhead, adaptive_bulkhead: longest wait for a slot
	RetryAfter     time.Duration // bulkhead, adaptive_bulkhead, loadshed: retry delay of a refusal
	MinLimit       int           // adaptive_bulkhead, runlimit: floor of the limit (default 1)
	MaxLimit       int           // adaptive_bulkhead, runlimit: ceiling (default 1000)
	InitialLimit   int           // adaptive_bulkhead (default 20), runlimit (0: its default)
	LatencyCeiling time.Duration // adaptive_bulkhead: 0 off
	ProbeInterval  time.Duration // adaptive_bulkhead: default 10s
	ShedPolicy     string        // loadshed: "aimd" (default) or "step"
	Factor         float64       // loadshed step: scale while saturated, default 0.2
	Threshold      float64       // loadshed aimd: utilisation steered below, in (0.05, 1], default 0.8
	Margin         float64       // deadline: factor on the service time, default 1
	Target         time.Duration // queuedelay: default 5ms
	Interval       time.Duration // queuedelay: default 100ms; runlimit: default 100ms
	QueueTarget    time.Duration // runlimit: 0 learned
	CPU            bool          // runlimit: follow the CPU signal, default true
}

// Class is a criticality class, highest first: critical_plus, critical,
// sheddable_plus, sheddable. Lower classes are shed first. The
// zero Class, "", is none of them: Decode refuses it where a class is
// given, and Build reads it as critical.
type Class string

// Criticality classes.
const (
	CriticalPlus  Class = "critical_plus"
	Critical      Class = "critical"
	SheddablePlus Class = "sheddable_plus"
	Sheddable     Class = "sheddable"
)

// Criticality is the default class of calls whose levee-criticality
// header is missing or unknown: every rule reads calls' classes with it
// (see the package documentation). The zero value has no default class,
// which Build reads as critical; Decode sets critical. A plain value,
// safe to read concurrently and not to change while read, like Policy.
type Criticality struct {
	// Default is the class of methods not listed. Default critical. YAML:
	// default.
	Default Class
	// Methods are per-method (or per-service, "/pkg.Service/*") classes,
	// sorted by pattern. YAML: methods, a mapping from pattern to class.
	Methods []MethodClass
}

// MethodClass is the default class of one method pattern. The zero value
// is not valid. A plain value, as safe for concurrent use as Policy.
type MethodClass struct {
	Method string
	Class  Class
}

// Tenants names the tenants and their shares for max-min fair sharing. It
// names every rule's tenant header and the run limits' tenant weights. The
// zero value is not valid (it names no header). A plain value, safe to
// read from several goroutines, not to change while one reads it.
type Tenants struct {
	// Header is the metadata key naming a call's tenant, lower case;
	// required. YAML: header.
	Header string
	// DefaultWeight is the weight of tenants not listed, > 0. Default 1.
	// YAML: default_weight.
	DefaultWeight float64
	// Weights are the listed tenants' weights (> 0), sorted by tenant,
	// whose names are 1 to runlimit.MaxTenantLen bytes. YAML: weights, a
	// mapping from tenant to weight.
	Weights []TenantWeight
}

// TenantWeight is the weight of one tenant. The zero value is not valid
// (a weight is > 0). A plain value, read concurrently like Policy.
type TenantWeight struct {
	Tenant string
	Weight float64
}
