package memshed

import (
	"testing"
	"time"

	"github.com/levee-go/levee/admission"
)

// BenchmarkAdmitted is one admitted call through Admit, Start and Finish,
// without a budget (a server not short of memory) and with one.
func BenchmarkAdmitted(b *testing.B) {
	for _, budget := range []bool{false, true} {
		name := "no budget"
		if budget {
			name = "budget"
		}
		b.Run(name, func(b *testing.B) {
			sig := &fakeSignal{}
			s, err := NewManual("memory", sig)
			if err != nil {
				b.Fatal(err)
			}
			s.noFit, s.shrink = true, func() {}
			c := call(heavyMethod, admission.Critical)
			s.lookup(heavyMethod).cost.Store(MiB)
			if budget {
				var rs []running
				for range 64 {
					r, _ := enter(s, c)
					rs = append(rs, r)
				}
				sig.set(0.9, 0)
				s.Tick(t0.Add(time.Second))
				for _, r := range rs {
					r.finish(s)
				}
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d := s.Admit(c); d.Refused {
						b.Fatal("refused")
					}
					d := s.Start(c, admission.Permit{})
					s.Finish(c, d.Permit, admission.Outcome{})
				}
			})
		})
	}
}

// BenchmarkTick is one tick of the control and the cost fit with a
// handful of methods: what the shedder's goroutine pays every interval.
func BenchmarkTick(b *testing.B) {
	s, err := NewManual("memory", &fakeSignal{})
	if err != nil {
		b.Fatal(err)
	}
	var ms []*method
	for i := range 8 {
		ms = append(ms, s.lookup("/pkg.Svc/M"+string(rune('a'+i))))
	}
	now := t0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j, m := range ms {
			m.started.Add(uint64(1 + (i+j)%5))
		}
		now = now.Add(100 * time.Millisecond)
		s.Tick(now)
	}
}
