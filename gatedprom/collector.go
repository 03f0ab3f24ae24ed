package gatedprom

import (
	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/obsexport"
	"github.com/prometheus/client_golang/prometheus"
)

// An Option configures [NewCollector].
type Option func(*options)

type options struct {
	constLabels prometheus.Labels
	obs         *Observer
	obsSet      bool
}

// WithDatabase adds the constant label database=name to every metric, to tell apart the
// Connectors of one process (each needs its own collector and name).
func WithDatabase(name string) Option {
	return func(o *options) {
		if o.constLabels == nil {
			o.constLabels = prometheus.Labels{}
		}
		o.constLabels["database"] = name
	}
}

// WithObserver names the Observer whose histograms the collector exports, when it is neither
// c's Config().Observer nor to be made by the collector (for example when the Config's Observer
// is a function feeding several). The collector then attaches nothing. Nil exports no
// histograms.
func WithObserver(obs *Observer) Option {
	return func(o *options) { o.obs, o.obsSet = obs, true }
}

// NewCollector returns a prometheus.Collector for c: the metrics listed in the package
// documentation for every workload of c, gauges and counters read from c.AllStats() at every
// scrape, histograms from an Observer. That Observer is the one given with [WithObserver], or
// c's Config().Observer when it is a *[Observer], or else one the collector makes and attaches
// to c with [gated.Connector.Attach], so that a Connector from sql.Open and a DSN exports its
// histograms too. Collectors attach their own Observers side by side (gated fans every event
// out to each): two collectors of one Connector each export every histogram, and registering
// both in one registry fails as for any duplicate metric. Register one per Connector (with
// [WithDatabase] to tell several apart). It is safe for concurrent use and keeps working after
// c is closed (the counters then stay as they were).
func NewCollector(c *gated.Connector, opts ...Option) prometheus.Collector {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if !o.obsSet {
		var ok bool
		if o.obs, ok = c.Config().Observer.(*Observer); !ok {
			o.obs = NewObserver()
			c.Attach(o.obs)
		}
	}
	if o.obs != nil {
		o.obs.workloads.Prepare(c)
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, o.constLabels)
	}
	col := &collector{
		c:   c,
		obs: o.obs,

		running:        d("gated_running", "Execution permits held now.", "workload"),
		waiting:        d("gated_waiting", "Operations waiting for an execution permit now.", "workload"),
		concurrent:     d("gated_concurrent_limit", "B: execution permits of the workload.", "workload"),
		queue:          d("gated_queue_limit", "Q: admission permits beyond B (how many may wait).", "workload"),
		admitted:       d("gated_admitted_total", "Operations that got an execution permit.", "workload"),
		rejected:       d("gated_rejected_total", "Operations refused: full (at once, ErrAdmissionFull) or timeout (after gate_queue_wait, ErrAdmissionTimeout).", "workload", "reason"),
		canceled:       d("gated_canceled_total", "Operations whose context ended while they waited for an execution permit.", "workload"),
		serverTimeouts: d("gated_server_timeouts_total", "Statements the server ended: statement (57014, statement_timeout) or lock (55P03, lock_timeout).", "workload", "kind"),
		commitUnknown:  d("gated_commit_unknown_total", "Commits whose outcome is unknown: the connection was lost after COMMIT was sent.", "workload"),
		wait:           d("gated_wait_seconds", "Time from arriving at the gate to the execution permit, per admitted operation.", "workload"),
		connect:        d("gated_connect_seconds", "Time from the execution permit to a ready physical connection (reuse check, reset or dial).", "workload"),
		hold:           d("gated_hold_seconds", "Time from the execution permit to the end of the binding: what the permit cost.", "workload"),
		statement:      d("gated_statement_seconds", "Time inside each call into the inner driver (exec, query until its first result, begin, commit, ...).", "workload"),

		conns:         d("gated_connections", "Physical connections now, by state.", "state"),
		connsMax:      d("gated_connections_max", "P: the most physical connections open at once."),
		opened:        d("gated_connections_opened_total", "Physical connections opened."),
		closed:        d("gated_connections_closed_total", "Physical connections closed, by reason.", "reason"),
		connectErrors: d("gated_connect_errors_total", "Attempts to open a physical connection that failed while the caller's context was alive: the server's or network's failures."),
		connectCanc:   d("gated_connect_canceled_total", "Attempts to get a physical connection ready (dial or reuse check) cut short by the caller's context or deadline."),
	}
	return col
}

type collector struct {
	c   *gated.Connector
	obs *Observer

	running, waiting, concurrent, queue *prometheus.Desc
	admitted, rejected, canceled        *prometheus.Desc
	serverTimeouts, commitUnknown       *prometheus.Desc
	wait, connect, hold, statement      *prometheus.Desc
	conns, connsMax, opened, closed     *prometheus.Desc
	connectErrors, connectCanc          *prometheus.Desc
}

// Describe sends every metric's description, histograms included even without an Observer:
// a description of a metric that is then not collected is allowed.
func (col *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		col.running, col.waiting, col.concurrent, col.queue,
		col.admitted, col.rejected, col.canceled, col.serverTimeouts, col.commitUnknown,
		col.wait, col.connect, col.hold, col.statement,
		col.conns, col.connsMax, col.opened, col.closed, col.connectErrors, col.connectCanc,
	} {
		ch <- d
	}
}

// Collect reads every gate's Stats once (c.AllStats) and sends every metric.
func (col *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	var pool gated.PoolStats
	for name, s := range col.c.AllStats() {
		pool = s.Pool
		gauge(col.running, float64(s.Running), name)
		gauge(col.waiting, float64(s.Waiting), name)
		gauge(col.concurrent, float64(s.Concurrent), name)
		gauge(col.queue, float64(s.Queue), name)
		counter(col.admitted, s.Admitted, name)
		for reason, n := range obsexport.Rejected(&s) {
			counter(col.rejected, n, name, reason)
		}
		counter(col.canceled, s.Canceled, name)
		counter(col.serverTimeouts, s.StatementTimeouts, name, "statement")
		counter(col.serverTimeouts, s.LockTimeouts, name, "lock")
		counter(col.commitUnknown, s.CommitUnknown, name)
		if col.obs != nil {
			h := col.obs.workload(name)
			for _, x := range [...]struct {
				d *prometheus.Desc
				h *histogram
			}{{col.wait, &h.wait}, {col.connect, &h.connect}, {col.hold, &h.hold}, {col.statement, &h.statement}} {
				buckets, count, sum := x.h.snapshot()
				ch <- prometheus.MustNewConstHistogram(x.d, count, sum, buckets, name)
			}
		}
	}
	gauge(col.conns, float64(pool.Idle), "idle")
	gauge(col.conns, float64(pool.InUse), "in_use")
	gauge(col.connsMax, float64(pool.MaxConns))
	counter(col.opened, pool.Opened)
	for reason, n := range obsexport.Closed(&pool) {
		counter(col.closed, n, reason)
	}
	counter(col.connectErrors, pool.ConnectErrors)
	counter(col.connectCanc, pool.ConnectCanceled)
}
