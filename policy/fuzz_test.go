package policy

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecode: any input decodes to a valid policy or to errors, never a
// panic; every error carries a line and a column; and a decoded policy's
// Format decodes again to the same Format. The seed corpus is in
// testdata/fuzz/FuzzDecode; `go test -fuzz FuzzDecode ./policy` explores
// beyond it.
func FuzzDecode(f *testing.F) {
	f.Add(Example)
	f.Add(DefaultPolicy().Format())
	for _, tt := range errorCases {
		f.Add([]byte(tt.give))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Decode("fuzz.yaml", data)
		if err != nil {
			if p != nil {
				t.Fatalf("Decode returned a policy with its errors")
			}
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("Decode error %T %v is not a non-empty Errors", err, err)
			}
			for _, e := range es {
				if e.Line < 1 || e.Column < 1 || e.File != "fuzz.yaml" {
					t.Errorf("error without a place: %+v", e)
				}
				if !locPrefix.MatchString("test.yaml" + e.Error()[len("fuzz.yaml"):]) {
					t.Errorf("error %q is not file:line:column: ...", e)
				}
			}
			return
		}
		out := p.Format()
		p2, err := Decode("formatted.yaml", out)
		if err != nil {
			t.Fatalf("Format of a decoded policy does not decode: %v\n%s", err, out)
		}
		if out2 := p2.Format(); !bytes.Equal(out, out2) {
			t.Fatalf("Format is not stable:\n%s\n---\n%s", out, out2)
		}
	})
}
