package memshed

import (
	"math"
	"time"
)

// fit learns what a call of each method costs from the runtime's
// allocation counter: over each tick, the bytes allocated less the
// background rate are a sum of per-method costs times the calls of each
// method that started, fitted by exponentially weighted least squares
// with a slight ridge (1e-4 of each method's own weight) toward the mean cost, so that a method whose calls
// always come in the same proportion as another's shares the cost with
// it instead of swinging. It runs under Shedder.mu.
type fit struct {
	last       time.Time
	lastAllocs uint64
	have       bool

	// Weighted sums over ticks with calls: xx = Σ w·n nᵀ, xy = Σ w·n·y,
	// where n are the calls started per method and y the bytes allocated
	// less the background; calls and bytes are the plain sums Σ w·Σn and
	// Σ w·y, for the mean cost.
	xx    [MaxMethods + 1][MaxMethods + 1]float64
	xy    [MaxMethods + 1]float64
	calls float64
	bytes float64

	background float64 // bytes per second allocated when no call started
	haveBG     bool
}

func (f *fit) init(allocs uint64) { f.lastAllocs = allocs }

// meanCost is the mean bytes per call so far, at least MinCost.
func (f *fit) meanCost() int64 {
	if f.calls <= 0 {
		return MinCost
	}
	return max(int64(f.bytes/f.calls), MinCost)
}

// update takes the counters at now and, when calls started since the
// last update, refits every method's cost.
func (f *fit) update(now time.Time, allocs uint64, list []*method) {
	if !f.have {
		f.have, f.last, f.lastAllocs = true, now, allocs
		for _, m := range list {
			m.lastStarted = m.started.Load()
		}
		return
	}
	dt := now.Sub(f.last).Seconds()
	if dt <= 0 {
		return
	}
	da := float64(allocs - f.lastAllocs)
	if allocs < f.lastAllocs {
		da = 0
	}
	f.last, f.lastAllocs = now, allocs
	k := len(list)
	var n [MaxMethods + 1]float64
	total := 0.0
	for _, m := range list {
		s := m.started.Load()
		n[m.idx] = float64(s - m.lastStarted)
		m.lastStarted = s
		total += n[m.idx]
	}
	if total == 0 {
		// No call started: what was allocated is the background.
		rate := da / dt
		if !f.haveBG {
			f.background, f.haveBG = rate, true
		} else {
			a := 1 - math.Exp(-dt/CostWindow.Seconds())
			f.background += a * (rate - f.background)
		}
		return
	}
	y := max(da-f.background*dt, 0)
	w := math.Exp(-dt / CostWindow.Seconds())
	for i := 0; i < k; i++ {
		f.xy[i] = w*f.xy[i] + n[i]*y
		for j := 0; j < k; j++ {
			f.xx[i][j] = w*f.xx[i][j] + n[i]*n[j]
		}
	}
	f.calls = w*f.calls + total
	f.bytes = w*f.bytes + y
	f.solve(list)
}

// solve sets each method's cost from the weighted sums: the ridge
// regression (xx + λ·diag) c = xy + λ·diag·mean, by Gaussian elimination
// with partial pivoting on at most MaxMethods+1 unknowns.
func (f *fit) solve(list []*method) {
	k := len(list)
	mean := float64(f.meanCost())
	var a [MaxMethods + 1][MaxMethods + 2]float64
	var seen [MaxMethods + 1]bool
	for i := 0; i < k; i++ {
		d := f.xx[i][i]
		seen[i] = d > 0
		lambda := 1e-4*d + 1e-9
		for j := 0; j < k; j++ {
			a[i][j] = f.xx[i][j]
		}
		a[i][i] += lambda
		a[i][k] = f.xy[i] + lambda*mean
	}
	for col := 0; col < k; col++ {
		p := col
		for r := col + 1; r < k; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[p][col]) {
				p = r
			}
		}
		a[col], a[p] = a[p], a[col]
		if a[col][col] == 0 {
			continue
		}
		for r := col + 1; r < k; r++ {
			q := a[r][col] / a[col][col]
			if q == 0 {
				continue
			}
			for c := col; c <= k; c++ {
				a[r][c] -= q * a[col][c]
			}
		}
	}
	var c [MaxMethods + 1]float64
	for i := k - 1; i >= 0; i-- {
		v := a[i][k]
		for j := i + 1; j < k; j++ {
			v -= a[i][j] * c[j]
		}
		if a[i][i] != 0 {
			c[i] = v / a[i][i]
		}
	}
	for _, m := range list {
		cost := mean
		if seen[m.idx] && !math.IsNaN(c[m.idx]) {
			cost = c[m.idx]
		}
		m.cost.Store(max(int64(cost), MinCost))
	}
}
