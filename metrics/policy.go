package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/levee-go/levee/internal/nilness"
)

// PolicySource is a hot-reloaded policy, such as a *policy.Reloader;
// AddPolicy exports it.
type PolicySource interface {
	// Reloads returns how many reloads succeeded and how many failed.
	Reloads() (ok, failed uint64)
	// Hash identifies the policy in force; it must fit a float64 exactly
	// (at most 53 bits).
	Hash() uint64
}

// AddPolicy exports the reloads of a policy file,
// levee_policy_reload_total{result="ok"|"error"}, and the hash of the
// policy in force, levee_policy_hash, so that a dashboard shows when the
// policy changed and an alert fires on a rejected file. A Registry takes
// one PolicySource.
func (r *Registry) AddPolicy(p PolicySource) error {
	if nilness.Is(p) {
		return fmt.Errorf("%w: AddPolicy: nil PolicySource", ErrInvalid)
	}
	return r.addSingle(&r.policy, "AddPolicy: a policy", newPolicyCollector(p))
}

type policyCollector struct {
	p             PolicySource
	reloads, hash *prometheus.Desc
}

func newPolicyCollector(p PolicySource) *policyCollector {
	return &policyCollector{
		p: p,
		reloads: newDesc("levee_policy_reload_total",
			"Reloads of the policy file, by result: ok (in force) or error (rejected; the policy in force stayed).", "", "result"),
		hash: newDesc("levee_policy_hash",
			"Hash of the policy in force (48 bits of the SHA-256 of its effective form, as `levee policy print` writes it); it changes when a reload changes the policy.", ""),
	}
}

func (c *policyCollector) Describe(ch chan<- *prometheus.Desc) { describe(ch, c.reloads, c.hash) }

func (c *policyCollector) Collect(ch chan<- prometheus.Metric) {
	ok, failed := c.p.Reloads()
	counter(ch, c.reloads, ok, "ok")
	counter(ch, c.reloads, failed, "error")
	gauge(ch, c.hash, float64(c.p.Hash()))
}
