// Package ewma holds the moving mean that levee's learners keep of
// service times: exponentially weighted, each sample weighing 1/8, in an
// atomic.Int64 that calls update without a lock. The run limit's flows
// (runlimit) and the deadline guard (deadline) keep theirs with it, so
// that the two means of one method move alike.
package ewma

import "sync/atomic"

// Weight is the inverse of the weight of a new sample: each moves the
// mean by 1/Weight of its distance from it, so that a step in the samples
// is about 88% through after 16 of them.
const Weight = 8

// Update folds the sample x into the mean held in v: the mean becomes x
// when v holds no mean yet (0 or less), else mean + (x-mean)/Weight, in
// integer arithmetic (the division truncates toward zero). It is safe
// for concurrent use: concurrent samples are each folded in once, in
// some order.
func Update(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		nv := x
		if old > 0 {
			nv = old + (x-old)/Weight
		}
		if v.CompareAndSwap(old, nv) {
			return
		}
	}
}
