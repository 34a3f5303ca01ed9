package policy

import _ "embed"

// Example is a commented policy that uses every section and every kind of
// guard; it passes Decode.
//
//go:embed example.yaml
var Example []byte
