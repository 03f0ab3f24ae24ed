// Package gatedprom exports a gated [gated.Connector] to Prometheus: the gate's gauges and
// counters read from [gated.Connector.Stats] at scrape time, so that they equal Stats exactly,
// and four duration histograms per workload recorded by an [Observer] attached to the
// Connector's Config.
//
//	obs := gatedprom.NewObserver()
//	cfg, err := gated.ParseDSN(dsn)
//	...
//	cfg.Observer = obs
//	c, err := gated.NewConnector(cfg)
//	...
//	db := gated.OpenDB(c)
//	prometheus.MustRegister(gatedprom.NewCollector(c, gatedprom.WithDatabase("shop")))
//
// Without the Observer (for example for a *sql.DB from sql.Open, found with [gated.FromDB]) the
// collector exports everything but the histograms.
//
// # Metrics
//
// Every gate metric has the label workload ("default" for the gate of gate_concurrent). Gauges:
// gated_running, gated_waiting, gated_concurrent_limit (B), gated_queue_limit (Q). Counters:
// gated_admitted_total, gated_rejected_total{reason="full"|"timeout"}, gated_canceled_total,
// gated_server_timeouts_total{kind="statement"|"lock"}, gated_commit_unknown_total. Histograms
// (seconds, buckets 100 µs to 10 s): gated_wait_seconds (arrival at the gate to the execution
// permit), gated_connect_seconds (permit to a ready physical connection), gated_hold_seconds
// (permit to the end of the binding), gated_statement_seconds (each call into the inner
// driver).
//
// The physical pool, shared by all workloads: gated_connections{state="idle"|"in_use"},
// gated_connections_max (P), gated_connections_opened_total,
// gated_connections_closed_total{reason="broken"|"lifetime"|"idle_time"|"dead_idle"|"close"},
// gated_connect_errors_total (the server's or network's failures) and
// gated_connect_canceled_total (attempts cut short by the caller's context).
package gatedprom

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatedsql/gated"
)

// bucketBounds are the histograms' upper bounds in seconds: database work from a pooled
// connection hand-over (100 µs) to a query that should have been cancelled (10 s).
var bucketBounds = [...]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

const numBuckets = len(bucketBounds)

// boundNanos are bucketBounds as durations, for comparing without converting every observation.
var boundNanos = func() (b [numBuckets]time.Duration) {
	for i, s := range bucketBounds {
		b[i] = time.Duration(s * float64(time.Second))
	}
	return b
}()

// Buckets returns the upper bounds, in seconds, of every histogram gatedprom exports.
func Buckets() []float64 { return append([]float64(nil), bucketBounds[:]...) }

// An Observer records gated's durations into histograms, one set per workload, for the
// collector of [NewCollector]. Attach it with [gated.Config.Observer]. It is safe for concurrent
// use, allocates nothing per event (only the first time a workload is seen) and takes no lock on
// the path of an operation: every bucket is an atomic counter.
type Observer struct {
	last      atomic.Pointer[workloadHists]             // the workload seen last: most events are for one
	workloads atomic.Pointer[map[string]*workloadHists] // copied on write

	mu sync.Mutex // serializes writers of workloads
}

// workloadHists are one workload's histograms.
type workloadHists struct {
	name                           string
	wait, connect, hold, statement histogram
}

// A histogram counts observations per bucket. The last count is the +Inf bucket.
type histogram struct {
	counts [numBuckets + 1]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < numBuckets && d > boundNanos[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// snapshot returns the cumulative bucket counts as Prometheus wants them, the total count and
// the sum in seconds. The count is the total of the buckets read, so a scrape during updates is
// consistent in itself.
func (h *histogram) snapshot() (buckets map[float64]uint64, count uint64, sum float64) {
	buckets = make(map[float64]uint64, numBuckets)
	for i := range numBuckets {
		count += h.counts[i].Load()
		buckets[bucketBounds[i]] = count
	}
	count += h.counts[numBuckets].Load()
	return buckets, count, time.Duration(h.sum.Load()).Seconds()
}

// NewObserver returns an Observer with no workloads yet.
func NewObserver() *Observer {
	o := &Observer{}
	o.workloads.Store(&map[string]*workloadHists{})
	return o
}

// Observe records e's duration in its workload's histogram; events without one are ignored
// (the collector reads the counters from Stats).
func (o *Observer) Observe(e gated.Event) {
	var h *histogram
	switch e.Kind {
	case gated.EventAdmitted:
		h = &o.workload(e.Workload).wait
	case gated.EventConnect:
		h = &o.workload(e.Workload).connect
	case gated.EventHold:
		h = &o.workload(e.Workload).hold
	case gated.EventStatement:
		h = &o.workload(e.Workload).statement
	default:
		return
	}
	h.observe(e.Duration)
}

// workload returns the histograms of name, making them the first time.
func (o *Observer) workload(name string) *workloadHists {
	if w := o.last.Load(); w != nil && w.name == name {
		return w
	}
	if w := (*o.workloads.Load())[name]; w != nil {
		o.last.Store(w)
		return w
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.workloads.Load()
	if w := old[name]; w != nil {
		return w
	}
	m := make(map[string]*workloadHists, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	w := &workloadHists{name: name}
	m[name] = w
	o.workloads.Store(&m)
	return w
}
