// Package gatedprom exports a gated [gated.Connector] to Prometheus: every gate's gauges and
// counters read from [gated.Connector.AllStats] at scrape time, so that they equal Stats exactly,
// and four duration histograms per workload recorded by an [Observer] that the collector
// attaches to the Connector itself. A service configured only by its DSN needs nothing else:
//
//	db, err := sql.Open("gated", dsn) // dsn with gate_workloads=batch:2:2, say
//	...
//	c, _ := gated.FromDB(db)
//	prometheus.MustRegister(gatedprom.NewCollector(c, gatedprom.WithDatabase("shop")))
//
// # Metrics
//
// Every gate metric has the label workload, one series per gate the Connector has ("default"
// for the gate of gate_concurrent, then every gate_workloads name), present at zero from the
// start. Gauges: gated_running, gated_waiting, gated_concurrent_limit (B; with
// gate_concurrent=auto the current limit, in a fleet this instance's share), gated_queue_limit
// (Q), gated_lent (permits of the workload held by other workloads' operations now, the workload
// option lend) and gated_borrowed (operations of the workload on a lent permit now). Counters:
// gated_admitted_total, gated_rejected_total{reason="full"|"timeout"|"displaced"} (every
// [gated.RejectReason] name), gated_canceled_total,
// gated_server_timeouts_total{kind="statement"|"lock"}, gated_commit_unknown_total.
// Histograms (seconds, buckets 100 µs to 10 s): gated_wait_seconds (arrival at the gate to the
// execution permit), gated_connect_seconds (permit to a ready physical connection),
// gated_hold_seconds (permit to the end of the binding),
// gated_statement_seconds (each call into the inner driver). The count of gated_wait_seconds
// is the workload's admitted operations, as gated_admitted_total, for everything admitted since
// the collector was made.
//
// The physical pool, shared by all workloads: gated_connections{state="idle"|"in_use"},
// gated_connections_max (P), gated_connections_opened_total,
// gated_connections_closed_total{reason="broken"|"lifetime"|"idle_time"|"dead_idle"|"close"|"canceled"|"shrunk"}
// (every [gated.CloseReasons] name), gated_connect_errors_total (the server's or network's
// failures) and gated_connect_canceled_total (dials and reuse checks cut short by the caller's
// context).
//
// In a fleet (gate_fleet=on), and only there, the instance's place in it ([gated.FleetStats]):
// gauges gated_fleet_members, gated_fleet_connections_share (this instance's share of
// gate_max_conns, its working connections; its lease connection is one more), gated_fleet_connections_total_limit, per
// workload gated_fleet_concurrent_total_limit and gated_fleet_queue_total_limit (the fleet's B
// and Q; the instance's share is gated_concurrent_limit and gated_queue_limit), and
// gated_fleet_seated (1 while the instance holds a share, else 0), gated_fleet_schema_missing (1
// while the fleet's table or functions are missing and the role may not create them); counters
// gated_fleet_share_changes_total and gated_fleet_refresh_errors_total. Outside a fleet they are
// not exported, so that an alert on gated_fleet_seated == 0 fires only for an instance of a
// fleet, never for a Connector that is in none.
package gatedprom

import (
	"sync/atomic"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/obsexport"
)

const numBuckets = len(obsexport.BucketBounds)

// boundNanos are the bucket bounds as durations, for comparing without converting every
// observation.
var boundNanos = func() (b [numBuckets]time.Duration) {
	for i, s := range obsexport.BucketBounds {
		b[i] = time.Duration(s * float64(time.Second))
	}
	return b
}()

// Buckets returns the upper bounds, in seconds, of every histogram gatedprom exports.
func Buckets() []float64 { return obsexport.Buckets() }

// An Observer records gated's durations into histograms, one set per workload, for the
// collector of [NewCollector], which makes and attaches one itself: make one only to put it in
// [gated.Config.Observer] before the Connector exists, and [NewCollector] finds it there. It is
// safe for concurrent use, allocates nothing per event (only the first time a workload is seen)
// and takes no lock on the path of an operation: every bucket is an atomic counter.
type Observer struct {
	workloads *obsexport.Workloads[*workloadHists]
}

// workloadHists are one workload's histograms.
type workloadHists struct {
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
		buckets[obsexport.BucketBounds[i]] = count
	}
	count += h.counts[numBuckets].Load()
	return buckets, count, time.Duration(h.sum.Load()).Seconds()
}

// NewObserver returns an Observer with no workloads yet.
func NewObserver() *Observer {
	return &Observer{workloads: obsexport.NewWorkloads(func(string) *workloadHists { return &workloadHists{} })}
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
func (o *Observer) workload(name string) *workloadHists { return o.workloads.Get(name) }
