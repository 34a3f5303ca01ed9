package scenario

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/levee-go/levee/internal/harness/loadgen"
)

func TestPrefixWriter(t *testing.T) {
	var b bytes.Buffer
	w := prefixWriter{w: &b, prefix: "p "}
	for _, s := range []string{"one\n", "two\nthree\n"} {
		if n, err := w.Write([]byte(s)); err != nil || n != len(s) {
			t.Fatalf("Write(%q) = %d, %v; want %d, nil", s, n, err, len(s))
		}
	}
	if got, want := b.String(), "p one\np two\np three\n"; got != want {
		t.Errorf("prefixed output = %q, want %q", got, want)
	}
}

func TestNewRegistry(t *testing.T) {
	runs := func(context.Context, Env, Settings) (*Result, error) { return nil, nil }
	a, b := Scenario{Name: "a", Run: runs}, Scenario{Name: "b", Run: runs}
	tests := []struct {
		name    string
		give    []Scenario
		wantErr string // "" for no error
	}{
		{name: "two", give: []Scenario{a, b}},
		{name: "none", wantErr: "scenario: no scenarios"},
		{name: "no name", give: []Scenario{a, {Run: runs}}, wantErr: "scenario: scenario 1 has no name"},
		{name: "no run", give: []Scenario{{Name: "c"}}, wantErr: `scenario: "c" has no Run`},
		{name: "twice", give: []Scenario{a, b, a}, wantErr: `scenario: "a" registered twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewRegistry(tt.give...)
			if got := errString(err); got != tt.wantErr {
				t.Errorf("NewRegistry() error = %q, want %q", got, tt.wantErr)
			}
		})
	}

	r, err := NewRegistry(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Names(), ","); got != "a,b" {
		t.Errorf("Names() = %s, want a,b", got)
	}
	if got := r.Default().Name; got != "a" {
		t.Errorf("Default() = %q, want the first, a", got)
	}
	if s, ok := r.Lookup("b"); !ok || s.Name != "b" {
		t.Errorf("Lookup(b) = %q, %v; want b, true", s.Name, ok)
	}
	if _, ok := r.Lookup("c"); ok {
		t.Errorf("Lookup(c) ok = true, want false")
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestSpikePhases(t *testing.T) {
	s := Settings{Normal: time.Second, Spike: 2 * time.Second, Recovery: 3 * time.Second, NormalLoad: 0.5, SpikeLoad: 10}
	want := []loadgen.Phase{{Name: "normal", Duration: time.Second, Rate: 50}, {Name: "spike", Duration: 2 * time.Second, Rate: 1000}, {Name: "recovery", Duration: 3 * time.Second, Rate: 50}}
	got := s.SpikePhases(100)
	if len(got) != len(want) {
		t.Fatalf("SpikePhases(100) = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("SpikePhases(100)[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		give    string
		want    int64
		wantErr bool
	}{
		{give: "0", want: 0},
		{give: "8388608", want: 8 << 20},
		{give: "8MiB", want: 8 << 20},
		{give: "1.5 GiB", want: 3 << 29},
		{give: "512KiB", want: 512 << 10},
		{give: "2MB", want: 2_000_000},
		{give: "3kB", want: 3000},
		{give: "10B", want: 10},
		{give: "-1MiB", wantErr: true},
		{give: "lots", wantErr: true},
		{give: "8 MiBs", wantErr: true},
		{give: "2PiB", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.give)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %t", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
	for _, n := range []int64{0, 1000, 8 << 20, 3 << 30, 1536} {
		if got, err := ParseSize(FormatSize(n)); err != nil || got != n {
			t.Errorf("ParseSize(FormatSize(%d) = %q) = %d, %v", n, FormatSize(n), got, err)
		}
	}
}
