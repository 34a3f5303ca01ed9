package fair

import (
	"fmt"
	"sync"
	"testing"
)

// TestTenantsAddOnce: concurrent Adds of one name make one entry; an
// entry mk declines to add is returned but not kept.
func TestTenantsAddOnce(t *testing.T) {
	var tt Tenants[int]
	tt.Init()
	var made sync.Map
	var wg sync.WaitGroup
	got := make([]*int, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = tt.Add("a", func() (*int, bool) {
				v := new(int)
				made.Store(v, true)
				return v, true
			})
		}()
	}
	wg.Wait()
	n := 0
	made.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("16 concurrent Adds of one name made %d entries, want 1", n)
	}
	for i, v := range got {
		if v != got[0] || tt.Get("a") != v {
			t.Fatalf("Add %d returned another entry than Get's", i)
		}
	}
	other := new(int)
	if v := tt.Add("b", func() (*int, bool) { return other, false }); v != other || tt.Get("b") != nil {
		t.Errorf("declined entry: Add returned %p (want %p), Get %p (want nil)", v, other, tt.Get("b"))
	}
}

// TestTenantsSweepEach: Sweep removes what its function drops and counts
// it; Each visits every entry until told to stop.
func TestTenantsSweepEach(t *testing.T) {
	var tt Tenants[int]
	tt.Init()
	for i := range 100 {
		tt.Add(fmt.Sprint(i), func() (*int, bool) { v := i; return &v, true })
	}
	if n := tt.Sweep(func(v *int) bool { return *v%2 == 1 }); n != 50 {
		t.Errorf("Sweep of the odd entries removed %d, want 50", n)
	}
	seen := 0
	if !tt.Each(func(v *int) bool {
		if *v%2 == 1 {
			t.Errorf("entry %d left after the sweep", *v)
		}
		seen++
		return true
	}) {
		t.Errorf("Each reported a stop it was not told")
	}
	if seen != 50 {
		t.Errorf("Each visited %d entries, want 50", seen)
	}
	calls := 0
	if tt.Each(func(*int) bool { calls++; return false }) || calls != 1 {
		t.Errorf("Each told to stop: %d calls, want 1 and false", calls)
	}
	if n := tt.Sweep(func(*int) bool { return true }); n != 50 || tt.Get("0") != nil {
		t.Errorf("Sweep of every entry removed %d (want 50); Get(\"0\") = %v after", n, tt.Get("0"))
	}
}
