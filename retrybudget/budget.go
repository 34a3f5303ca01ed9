package retrybudget

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Defaults of a Budget.
const (
	// DefaultRatio is the share of requests that may be retried: 10%, the
	// SRE book's per-client budget.
	DefaultRatio = 0.1
	// DefaultWindow is how far back requests and retries are counted.
	DefaultWindow = 10 * time.Second
	// DefaultBins is how many bins the window is kept in.
	DefaultBins = 10
)

// maxBins bounds WithWindow's bins: the ring is read in full by every
// TryRetryAt.
const maxBins = 1000

// A bin's word: its number (the bin's start divided by its width, modulo
// 2^stampBits) above its count.
const (
	countBits = 24
	stampBits = 64 - countBits
	countMax  = 1<<countBits - 1
	stampMask = 1<<stampBits - 1
)

// Option configures a Budget; each documents its default and range. An
// option only records its value: New validates them all and names every
// bad one. A nil Option is ignored.
type Option func(*options)

type options struct {
	ratio float64
	size  time.Duration
	bins  int
	min   int
	now   func() time.Time // tests replace it
}

// WithRatio sets the retries allowed per request over the window. Default
// DefaultRatio (0.1). ratio must be in [0, 100]; 0 allows only
// WithMinRetries's retries.
func WithRatio(ratio float64) Option { return func(o *options) { o.ratio = ratio } }

// WithWindow sets the sliding window over which requests and retries are
// counted, kept in bins bins of size/bins each. Default DefaultWindow in
// DefaultBins bins. It needs bins in [1, 1000] and size/bins >= 1ms.
func WithWindow(size time.Duration, bins int) Option {
	return func(o *options) { o.size, o.bins = size, bins }
}

// WithMinRetries allows n retries per window whatever the requests, so
// that a client that makes few calls can still retry now and then.
// Default 0: retries are only the ratio of requests. n must be >= 0.
func WithMinRetries(n int) Option { return func(o *options) { o.min = n } }

func (o *options) validate() error {
	var errs []error
	if !(o.ratio >= 0 && o.ratio <= 100) {
		errs = append(errs, fmt.Errorf("retrybudget: WithRatio: ratio must be in [0, 100], got %v", o.ratio))
	}
	if o.bins < 1 || o.bins > maxBins || o.size <= 0 || o.size/time.Duration(max(o.bins, 1)) < time.Millisecond {
		errs = append(errs, fmt.Errorf("retrybudget: WithWindow: want bins in [1, %d] and size/bins >= 1ms, got %v in %d bins", maxBins, o.size, o.bins))
	}
	if o.min < 0 {
		errs = append(errs, fmt.Errorf("retrybudget: WithMinRetries: n must be >= 0, got %d", o.min))
	}
	return errors.Join(errs...)
}

// Budget is the retry budget of one downstream: retries at most a ratio
// of the requests over a sliding window. Create one with New (by default
// 10% of the requests of the last 10 seconds); the zero value is not
// usable. A Budget is safe for concurrent use, lock-free, and allocates
// nothing.
type Budget struct {
	ratio    float64
	min      int64
	width    int64 // ns per bin
	n        int64 // bins
	now      func() time.Time
	base     time.Time // at New, with a monotonic reading
	baseUnix int64

	requests []atomic.Uint64 // a word per bin: stamp<<countBits | count
	retries  []atomic.Uint64

	granted atomic.Uint64
	refused atomic.Uint64
}

// New returns a Budget configured by opts, or an error naming every bad
// option value.
func New(opts ...Option) (*Budget, error) {
	o := options{ratio: DefaultRatio, size: DefaultWindow, bins: DefaultBins, now: time.Now}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	b := &Budget{
		ratio:    o.ratio,
		min:      int64(o.min),
		width:    int64(o.size / time.Duration(o.bins)),
		n:        int64(o.bins),
		now:      o.now,
		requests: make([]atomic.Uint64, o.bins),
		retries:  make([]atomic.Uint64, o.bins),
	}
	b.base = time.Now()
	b.baseUnix = b.base.UnixNano()
	return b, nil
}

// Request counts a request (a call's first attempt) now; it is RequestAt
// at the current time.
func (b *Budget) Request() { b.RequestAt(b.now()) }

// RequestAt counts a request — a call's first attempt, not its retries —
// made at now.
func (b *Budget) RequestAt(now time.Time) {
	bin := b.bin(now)
	_, _ = add(&b.requests[mod(bin, b.n)], bin, 1)
}

// TryRetry reports whether a retry may be made now, and counts it if so;
// it is TryRetryAt at the current time.
func (b *Budget) TryRetry() bool { return b.TryRetryAt(b.now()) }

// TryRetryAt reports whether a retry may be made at now: whether, with
// it, the retries over the window ending at now are at most ratio × the
// requests plus WithMinRetries's n. A retry it allows is counted; one it
// refuses is not (the caller gives up on the call). An instant a whole
// window or more before the latest one seen (a clock that stepped back)
// counts in, and is judged by, the newer window its bins hold.
func (b *Budget) TryRetryAt(now time.Time) bool {
	bin := b.bin(now)
	w := &b.retries[mod(bin, b.n)]
	stamp, ok := add(w, bin, 1)
	if !ok {
		b.refused.Add(1)
		return false
	}
	// The retry is counted in the bin of stamp: bin itself, or the newer
	// bin its word held when now is a whole window or more behind the
	// latest time seen (the clock stepped back). It is judged with the
	// window that holds it, or it would not count against itself, nor
	// the retries and requests counted with it.
	req, ret := b.totals(bin + int64((stamp-uint64(bin))&stampMask))
	if float64(ret) <= b.ratio*float64(req)+float64(b.min) {
		b.granted.Add(1)
		return true
	}
	undo(w, stamp)
	b.refused.Add(1)
	return false
}

// Snapshot is a Budget's counts at one instant. It is a plain value that
// shares nothing with the Budget: safe to copy and to read from several
// goroutines, not to write from several at once. The zero Snapshot is an
// empty window of a Budget that has decided nothing.
type Snapshot struct {
	Requests, Retries int64  // in the window ending at the snapshot's time
	Granted, Refused  uint64 // TryRetryAt's answers since New
}

// Snapshot returns the budget's counts now; it is SnapshotAt at the
// current time.
func (b *Budget) Snapshot() Snapshot { return b.SnapshotAt(b.now()) }

// SnapshotAt returns the counts over the window ending at now.
func (b *Budget) SnapshotAt(now time.Time) Snapshot {
	req, ret := b.totals(b.bin(now))
	return Snapshot{Requests: req, Retries: ret, Granted: b.granted.Load(), Refused: b.refused.Load()}
}

// bin returns the number of the bin holding now: its start, measured from
// the Unix epoch through the monotonic reading taken at New (as the
// throttle does), divided by the bin's width.
func (b *Budget) bin(now time.Time) int64 {
	n := b.baseUnix + int64(now.Sub(b.base))
	q := n / b.width
	if n%b.width != 0 && n < 0 {
		q--
	}
	return q
}

// totals sums the bins of the window whose newest bin is bin.
func (b *Budget) totals(bin int64) (requests, retries int64) {
	i := mod(bin, b.n)
	for want := bin; want > bin-b.n; want-- {
		requests += countOf(b.requests[i].Load(), want)
		retries += countOf(b.retries[i].Load(), want)
		if i--; i < 0 {
			i = b.n - 1
		}
	}
	return requests, retries
}

// countOf is the count of word w if it holds bin, else 0.
func countOf(w uint64, bin int64) int64 {
	if w>>countBits != uint64(bin)&stampMask {
		return 0
	}
	return int64(w & countMax)
}

// add counts delta (>= 1) in word w for bin: it restarts a word holding an
// older bin, and counts in a word holding a newer one (time that went
// back a whole window). It returns the stamp of the bin it counted in,
// and false if the count is saturated.
func add(w *atomic.Uint64, bin int64, delta uint64) (uint64, bool) {
	stamp := uint64(bin) & stampMask
	if old := w.Load(); old>>countBits == stamp && old&countMax+delta <= countMax/2 {
		// The common case, one atomic add: the word holds bin, far from
		// saturated. Should another goroutine restart the word for a newer
		// bin meanwhile, the count lands in that bin, as time that went
		// back does.
		return (w.Add(delta) >> countBits), true
	}
	for {
		old := w.Load()
		next := stamp<<countBits | delta
		if s := old >> countBits; s == stamp || newer(s, stamp) {
			if old&countMax+delta > countMax {
				return s, false
			}
			next = old + delta
		}
		if w.CompareAndSwap(old, next) {
			return next >> countBits, true
		}
	}
}

// undo takes back one count from word w if it still holds the bin of
// stamp (otherwise the word has moved on to a newer bin, and the count is
// gone anyway).
func undo(w *atomic.Uint64, stamp uint64) {
	for {
		old := w.Load()
		if old>>countBits != stamp || old&countMax == 0 {
			return
		}
		if w.CompareAndSwap(old, old-1) {
			return
		}
	}
}

// newer reports whether stamp s is after t, in the modular arithmetic of
// stamps.
func newer(s, t uint64) bool {
	d := (s - t) & stampMask
	return d != 0 && d < 1<<(stampBits-1)
}

func mod(a, n int64) int64 {
	m := a % n
	if m < 0 {
		m += n
	}
	return m
}
