// Package obsexport is what gatedprom and gatedotel share to export a gated Connector: the
// histograms' bucket bounds, the copy-on-write table of per-workload state their Observers keep,
// and the labelled counters of the pool's close reasons and the gates' refusal reasons, so that
// both exporters name the same things the same way.
package obsexport

import (
	"iter"
	"sync"
	"sync/atomic"

	"github.com/gatedsql/gated"
)

// BucketBounds are the duration histograms' upper bounds in seconds: database work from a
// pooled connection hand-over (100 µs) to a query that should have been cancelled (10 s).
var BucketBounds = [...]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Buckets returns a copy of BucketBounds.
func Buckets() []float64 { return append([]float64(nil), BucketBounds[:]...) }

// Workloads is a table from a workload's name to a V made for it on first use, read without a
// lock on the path of every operation: the map is copied on write, and writes are rare (a
// workload's first event).
type Workloads[V any] struct {
	newV func(name string) V
	m    atomic.Pointer[map[string]V]
	mu   sync.Mutex // serializes writers
}

// NewWorkloads returns a table whose entries newV makes.
func NewWorkloads[V any](newV func(name string) V) *Workloads[V] {
	w := &Workloads[V]{newV: newV}
	w.m.Store(&map[string]V{})
	return w
}

// Get returns name's entry, making it the first time.
func (w *Workloads[V]) Get(name string) V {
	if v, ok := (*w.m.Load())[name]; ok {
		return v
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	old := *w.m.Load()
	if v, ok := old[name]; ok {
		return v
	}
	m := make(map[string]V, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	v := w.newV(name)
	m[name] = v
	w.m.Store(&m)
	return v
}

// Prepare makes the entries of every workload of c, so that each is exported, at zero, before
// its first operation.
func (w *Workloads[V]) Prepare(c *gated.Connector) {
	for _, name := range c.Workloads() {
		w.Get(name)
	}
}

// Closed yields each close reason's label value (CloseReason.String) and count in s.
func Closed(s *gated.PoolStats) iter.Seq2[string, int64] {
	return func(yield func(string, int64) bool) {
		for r := range gated.CloseReasons() {
			if !yield(r.String(), s.ClosedFor(r)) {
				return
			}
		}
	}
}

// Rejected yields each refusal reason's label value (RejectReason.String) and count in s: full,
// timeout and displaced, in that order.
func Rejected(s *gated.Stats) iter.Seq2[string, int64] {
	return func(yield func(string, int64) bool) {
		if yield(gated.RejectFull.String(), s.RejectedFull) && yield(gated.RejectTimeout.String(), s.RejectedTimeout) {
			yield(gated.RejectDisplaced.String(), s.RejectedDisplaced)
		}
	}
}
