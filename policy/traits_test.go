package policy

import (
	"testing"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// The example's criticality and tenants sections reach every rule: the
// class of each method, the tenant header, and run limits whose identity
// changes with the weights.
func TestCriticalityAndTenantsBuilt(t *testing.T) {
	p, err := Decode("example.yaml", []byte(Example))
	if err != nil {
		t.Fatal(err)
	}
	b, err := build(p, 1, nil, idleCPU{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.closeUnused(nil)
	if len(b.rules) == 0 {
		t.Fatal("no rule built")
	}
	in := decide.Facts{Lookup: &decide.Snapshot{Headers: map[string]string{"x-tenant-id": "acme"}}}
	for _, r := range b.rules {
		if r.Criticality == nil || r.Tenant == nil {
			t.Fatalf("rule %q: criticality %v, tenant key %v; want both set", r.Name, r.Criticality, r.Tenant)
		}
		if got := r.Criticality.Methods["/corecart.inventory.v1.InventoryService/GetStock"]; got != admission.SheddablePlus {
			t.Errorf("rule %q: GetStock's class %v, want sheddable_plus", r.Name, got)
		}
		if got := r.Tenant(in); got != "acme" {
			t.Errorf("rule %q: tenant %q, want acme", r.Name, got)
		}
	}
	// New weights: a new run limit; the same: the same one.
	p2, err := Decode("example.yaml", []byte(Example))
	if err != nil {
		t.Fatal(err)
	}
	same, err := build(p2, 2, b, idleCPU{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p2.Tenants.Weights[0].Weight = 7
	changed, err := build(p2, 3, b, idleCPU{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	runs := func(x *built) map[string]admission.Guard {
		m := map[string]admission.Guard{}
		for id, in := range x.inst {
			if in.Guard != nil && in.Guard.Name() == "run" {
				m[id] = in.Guard
			}
		}
		return m
	}
	before, kept, after := runs(b), runs(same), runs(changed)
	if len(before) == 0 {
		t.Fatal("the example builds no run limit")
	}
	for id, g := range before {
		if kept[id] != g {
			t.Errorf("run limit %q rebuilt with the same weights", id)
		}
		if after[id] == g {
			t.Errorf("run limit %q kept though the weights changed", id)
		}
	}
}

// idleCPU is a CPU signal that is never saturated.
type idleCPU struct{}

func (idleCPU) Utilization() float64 { return 0.1 }
func (idleCPU) Saturated() bool      { return false }
