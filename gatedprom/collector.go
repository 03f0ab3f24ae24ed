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
		concurrent:     d("gated_concurrent_limit", "B: execution permits of the workload; with gate_concurrent=auto the current limit, in a fleet this instance's share.", "workload"),
		queue:          d("gated_queue_limit", "Q: admission permits beyond B (how many may wait); in a fleet this instance's share.", "workload"),
		lent:           d("gated_lent", "Execution permits of the workload held now by other workloads' operations (the workload option lend).", "workload"),
		borrowed:       d("gated_borrowed", "Operations counted in gated_running that hold a permit lent by another workload.", "workload"),
		admitted:       d("gated_admitted_total", "Operations that got an execution permit.", "workload"),
		rejected:       d("gated_rejected_total", "Operations refused: full (at once, ErrAdmissionFull), timeout (after gate_queue_wait, ErrAdmissionTimeout) or displaced (while waiting, by a caller of higher priority or of a tenant with fewer waiters, ErrAdmissionDisplaced).", "workload", "reason"),
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

		fleet:             c.Config().Fleet,
		fleetMembers:      d("gated_fleet_members", "Live instances of the fleet (gate_fleet=on) as the last successful refresh saw them, this one included."),
		fleetConns:        d("gated_fleet_connections_share", "This instance's share of the fleet's working connections (its lease connection is one more, outside it); 0 while it joins or is fenced."),
		fleetTotalConns:   d("gated_fleet_connections_total_limit", "The fleet's gate_max_conns: the physical connections of all its instances together."),
		fleetConcurrent:   d("gated_fleet_concurrent_total_limit", "The fleet's B of the workload: execution permits of all its instances together.", "workload"),
		fleetQueue:        d("gated_fleet_queue_total_limit", "The fleet's Q of the workload: admission permits beyond B of all its instances together.", "workload"),
		fleetSeated:       d("gated_fleet_seated", "1 while this instance holds a share of the fleet's connections, else 0 (it refuses every operation)."),
		fleetShareChanges: d("gated_fleet_share_changes_total", "Times this instance's share of the fleet changed."),
		fleetRefreshErrs:  d("gated_fleet_refresh_errors_total", "Lease refreshes of this instance that failed (the share is kept, never grown, until it is fenced)."),
		fleetSchemaMiss:   d("gated_fleet_schema_missing", "1 while the fleet's table or this version's functions are missing and this instance's role may not create them, else 0."),
	}
	return col
}

type collector struct {
	c   *gated.Connector
	obs *Observer

	running, waiting, concurrent, queue *prometheus.Desc
	lent, borrowed                      *prometheus.Desc
	admitted, rejected, canceled        *prometheus.Desc
	serverTimeouts, commitUnknown       *prometheus.Desc
	wait, connect, hold, statement      *prometheus.Desc
	conns, connsMax, opened, closed     *prometheus.Desc
	connectErrors, connectCanc          *prometheus.Desc

	// The fleet's metrics, collected only when the Connector is in a fleet (Config.Fleet).
	fleet                                     bool
	fleetMembers, fleetConns, fleetTotalConns *prometheus.Desc
	fleetConcurrent, fleetQueue, fleetSeated  *prometheus.Desc
	fleetShareChanges, fleetRefreshErrs       *prometheus.Desc
	fleetSchemaMiss                           *prometheus.Desc
}

// Describe sends every metric's description, histograms included even without an Observer and
// the fleet's even without a fleet: a description of a metric that is then not collected is
// allowed.
func (col *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		col.running, col.waiting, col.concurrent, col.queue, col.lent, col.borrowed,
		col.admitted, col.rejected, col.canceled, col.serverTimeouts, col.commitUnknown,
		col.wait, col.connect, col.hold, col.statement,
		col.conns, col.connsMax, col.opened, col.closed, col.connectErrors, col.connectCanc,
		col.fleetMembers, col.fleetConns, col.fleetTotalConns, col.fleetConcurrent, col.fleetQueue,
		col.fleetSeated, col.fleetShareChanges, col.fleetRefreshErrs, col.fleetSchemaMiss,
	} {
		ch <- d
	}
}

// Collect reads every gate's Stats once (c.AllStats) and sends every metric, the fleet's only
// when the Connector is in a fleet.
func (col *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	var pool gated.PoolStats
	var fleet gated.FleetStats
	for name, s := range col.c.AllStats() {
		pool, fleet = s.Pool, s.Fleet
		gauge(col.running, float64(s.Running), name)
		gauge(col.waiting, float64(s.Waiting), name)
		gauge(col.concurrent, float64(s.Concurrent), name)
		gauge(col.queue, float64(s.Queue), name)
		gauge(col.lent, float64(s.Lent), name)
		gauge(col.borrowed, float64(s.Borrowed), name)
		if col.fleet {
			gauge(col.fleetConcurrent, float64(s.Fleet.TotalConcurrent), name)
			gauge(col.fleetQueue, float64(s.Fleet.TotalQueue), name)
		}
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
	if col.fleet {
		gauge(col.fleetMembers, float64(fleet.Members))
		gauge(col.fleetConns, float64(fleet.Conns))
		gauge(col.fleetTotalConns, float64(fleet.TotalConns))
		gauge(col.fleetSeated, boolGauge(fleet.Seated))
		counter(col.fleetShareChanges, fleet.ShareChanges)
		counter(col.fleetRefreshErrs, fleet.RefreshErrors)
		gauge(col.fleetSchemaMiss, boolGauge(fleet.SchemaMissing))
	}
}

// boolGauge is a gauge's value for a condition: 1 while it holds, else 0.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
