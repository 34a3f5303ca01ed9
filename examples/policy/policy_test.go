package main

import (
	"os"
	"testing"

	"github.com/levee-go/levee/policy"
)

// TestPolicyFileChecks: the file the example ships is a valid policy.
func TestPolicyFileChecks(t *testing.T) {
	data, err := os.ReadFile("policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Decode("policy.yaml", data); err != nil {
		t.Errorf("policy.Decode(policy.yaml) = %v, want a valid policy", err)
	}
}
