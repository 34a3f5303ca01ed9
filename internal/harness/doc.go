// Package harness holds nothing itself: its sub-packages are the load-test
// harness that `levee demo`, `levee load` and the bench/peers module share
// — the open-loop load generator (loadgen), the report (report), process
// samples (stats), the protected and unprotected targets (target) and CPU
// pinning (affinity). None of it is library code: the library's own
// helpers are internal/clock, internal/window and internal/preset, and
// the demo's scenarios live under cmd/levee/internal.
package harness
