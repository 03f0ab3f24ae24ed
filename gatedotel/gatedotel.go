// Package gatedotel exports a gated [gated.Connector] as OpenTelemetry metrics, following the
// semantic conventions for database client connection pools, plus the gate's own instruments.
//
//	obs, err := gatedotel.NewObserver(gatedotel.WithMeterProvider(mp), gatedotel.WithPoolName("shop"))
//	...
//	cfg.Observer = obs // cfg from gated.ParseDSN or gated.NewConfig
//	c, err := gated.NewConnector(cfg)
//	...
//	reg, err := obs.Register(c) // the asynchronous instruments, read from c.Stats()
//	defer reg.Unregister()
//
// The names follow semantic conventions v1.43.0 (the Go module
// go.opentelemetry.io/otel/semconv/v1.43.0, model/db/metrics.yaml of
// open-telemetry/semantic-conventions), where the connection-pool metrics are still in
// development:
//
//   - db.client.connection.count ({connection}, by db.client.connection.state = idle | used):
//     the physical pool's idle and in-use connections.
//   - db.client.connection.max and db.client.connection.idle.max ({connection}): P (gated keeps
//     up to P idle).
//   - db.client.connection.pending_requests ({request}): operations waiting for an execution
//     permit, which in gated is the only wait for a connection.
//   - db.client.connection.timeouts ({timeout}): refusals with ErrAdmissionTimeout.
//   - db.client.connection.create_time (s): opening one physical connection.
//   - db.client.connection.wait_time (s): arrival at the gate to the execution permit.
//   - db.client.connection.use_time (s): the permit to the end of the binding (hold time).
//
// Every one has db.client.connection.pool.name (the pool name, default "gated"); the wait and
// use times and all of the gate's own instruments also carry gated.workload. The gate's own:
// gated.running, gated.waiting, gated.concurrent.limit, gated.queue.limit ({operation});
// gated.admitted, gated.rejected (by gated.rejected.reason = full | timeout), gated.canceled
// ({operation}); gated.server_timeouts (by gated.server_timeout.kind = statement | lock),
// gated.commit_unknown; gated.connect.duration and gated.statement.duration (s); and for the
// pool gated.connections.opened, gated.connections.closed (by gated.close.reason),
// gated.connect.errors and gated.connect.canceled. Counters are read from Stats, so they equal
// it exactly.
package gatedotel

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/gatedsql/gated"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The instrumentation scope.
const scopeName = "github.com/gatedsql/gated/gatedotel"

// The attribute keys gated adds beside the semantic conventions'.
const (
	WorkloadKey     = attribute.Key("gated.workload")            // the gate's workload, "default" for gate_concurrent's
	RejectReasonKey = attribute.Key("gated.rejected.reason")     // "full" or "timeout"
	TimeoutKindKey  = attribute.Key("gated.server_timeout.kind") // "statement" or "lock"
	CloseReasonKey  = attribute.Key("gated.close.reason")        // gated.CloseReason's String
)

const (
	defaultPoolName = "gated"
	secondsUnit     = "s"
	connectionUnit  = "{connection}"
	operationUnit   = "{operation}"
	requestUnit     = "{request}"
	timeoutUnit     = "{timeout}"
)

// An Option configures [NewObserver].
type Option func(*options)

type options struct {
	mp       metric.MeterProvider
	poolName string
}

// WithMeterProvider sets the MeterProvider (default otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.mp = mp } }

// WithPoolName sets db.client.connection.pool.name (default "gated"). Give each Connector of a
// process its own.
func WithPoolName(name string) Option { return func(o *options) { o.poolName = name } }

// An Observer records gated's durations into OpenTelemetry histograms and, once [Observer.Register]
// is called, reports a Connector's gauges and counters. Attach it with [gated.Config.Observer].
// It is safe for concurrent use and takes no lock on the path of an operation.
type Observer struct {
	meter    metric.Meter
	poolName string
	pool     []metric.RecordOption // the pool attribute, precomputed

	waitTime, useTime, createTime metric.Float64Histogram
	connectTime, statementTime    metric.Float64Histogram

	workloads atomic.Pointer[map[string][]metric.RecordOption] // precomputed attributes, copied on write
	mu        sync.Mutex                                       // serializes writers of workloads
}

// NewObserver makes the Observer's histograms on the MeterProvider. Errors are those of the
// MeterProvider creating an instrument.
func NewObserver(opts ...Option) (*Observer, error) {
	o := options{poolName: defaultPoolName}
	for _, opt := range opts {
		opt(&o)
	}
	if o.mp == nil {
		o.mp = otel.GetMeterProvider()
	}
	obs := &Observer{meter: o.mp.Meter(scopeName), poolName: o.poolName}
	obs.pool = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(semconv.DBClientConnectionPoolName(o.poolName)))}
	obs.workloads.Store(&map[string][]metric.RecordOption{})
	buckets := metric.WithExplicitBucketBoundaries(.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10)
	for _, h := range []struct {
		dst        *metric.Float64Histogram
		name, desc string
	}{
		{&obs.waitTime, "db.client.connection.wait_time", "The time it took to obtain an open connection from the pool: arrival at the gate to the execution permit."},
		{&obs.useTime, "db.client.connection.use_time", "The time between borrowing a connection and returning it to the pool: the execution permit to the end of the binding."},
		{&obs.createTime, "db.client.connection.create_time", "The time it took to create a new connection."},
		{&obs.connectTime, "gated.connect.duration", "The execution permit to a ready physical connection (reuse check, reset or dial)."},
		{&obs.statementTime, "gated.statement.duration", "Time inside each call into the inner driver."},
	} {
		var err error
		if *h.dst, err = obs.meter.Float64Histogram(h.name, metric.WithUnit(secondsUnit), metric.WithDescription(h.desc), buckets); err != nil {
			return nil, err
		}
	}
	return obs, nil
}

// Observe records e in its histogram; events without a duration are ignored (Register reads
// the counters from Stats).
func (o *Observer) Observe(e gated.Event) {
	var h metric.Float64Histogram
	switch e.Kind {
	case gated.EventAdmitted:
		h = o.waitTime
	case gated.EventHold:
		h = o.useTime
	case gated.EventConnect:
		h = o.connectTime
	case gated.EventStatement:
		h = o.statementTime
	case gated.EventConnOpened:
		o.createTime.Record(context.Background(), e.Duration.Seconds(), o.pool...)
		return
	default:
		return
	}
	h.Record(context.Background(), e.Duration.Seconds(), o.workload(e.Workload)...)
}

// workload returns the precomputed attributes of name, making them the first time.
func (o *Observer) workload(name string) []metric.RecordOption {
	if a, ok := (*o.workloads.Load())[name]; ok {
		return a
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.workloads.Load()
	if a, ok := old[name]; ok {
		return a
	}
	m := make(map[string][]metric.RecordOption, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	a := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
		semconv.DBClientConnectionPoolName(o.poolName), WorkloadKey.String(name)))}
	m[name] = a
	o.workloads.Store(&m)
	return a
}

// Register registers the asynchronous instruments that read c.Stats() at every collection:
// the semantic conventions' counts, limits, pending requests and timeouts, and the gate's own
// gauges and counters. Call Unregister on the result to stop. Register does not need the
// Observer to be c's: with sql.Open's Connector (found with gated.FromDB) the histograms stay
// empty and everything else works.
func (o *Observer) Register(c *gated.Connector) (metric.Registration, error) {
	m := o.meter
	var insts []metric.Observable
	var err error
	udc := func(name, unit, desc string) metric.Int64ObservableUpDownCounter {
		if err != nil {
			return nil
		}
		var i metric.Int64ObservableUpDownCounter
		i, err = m.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		insts = append(insts, i)
		return i
	}
	ctr := func(name, unit, desc string) metric.Int64ObservableCounter {
		if err != nil {
			return nil
		}
		var i metric.Int64ObservableCounter
		i, err = m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		insts = append(insts, i)
		return i
	}
	count := udc("db.client.connection.count", connectionUnit, "The number of connections that are currently in state described by the state attribute.")
	maxConns := udc("db.client.connection.max", connectionUnit, "The maximum number of open connections allowed.")
	idleMax := udc("db.client.connection.idle.max", connectionUnit, "The maximum number of idle open connections allowed.")
	pending := udc("db.client.connection.pending_requests", requestUnit, "The number of current pending requests for an open connection.")
	timeouts := ctr("db.client.connection.timeouts", timeoutUnit, "The number of connection timeouts that have occurred trying to obtain a connection from the pool.")
	running := udc("gated.running", operationUnit, "Execution permits held now.")
	waiting := udc("gated.waiting", operationUnit, "Operations waiting for an execution permit now.")
	concurrent := udc("gated.concurrent.limit", operationUnit, "B: execution permits.")
	queue := udc("gated.queue.limit", operationUnit, "Q: admission permits beyond B.")
	admitted := ctr("gated.admitted", operationUnit, "Operations that got an execution permit.")
	rejected := ctr("gated.rejected", operationUnit, "Operations refused: full (at once) or timeout (after gate_queue_wait).")
	canceled := ctr("gated.canceled", operationUnit, "Operations whose context ended while they waited.")
	serverTimeouts := ctr("gated.server_timeouts", "{statement}", "Statements the server ended: statement (57014) or lock (55P03) timeout.")
	commitUnknown := ctr("gated.commit_unknown", "{commit}", "Commits whose outcome is unknown.")
	opened := ctr("gated.connections.opened", connectionUnit, "Physical connections opened.")
	closed := ctr("gated.connections.closed", connectionUnit, "Physical connections closed, by reason.")
	connectErrors := ctr("gated.connect.errors", "{attempt}", "Attempts to open a connection that failed while the caller's context was alive.")
	connectCanceled := ctr("gated.connect.canceled", "{attempt}", "Attempts to open a connection cut short by the caller's context.")
	if err != nil {
		return nil, err
	}

	poolName := semconv.DBClientConnectionPoolName(o.poolName)
	poolOnly := metric.WithAttributes(poolName)
	idle := metric.WithAttributes(poolName, semconv.DBClientConnectionStateIdle)
	used := metric.WithAttributes(poolName, semconv.DBClientConnectionStateUsed)
	return m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		s := c.Stats()
		// One gate today; with named workloads, loop over them here (Connector.WorkloadStats).
		wl := metric.WithAttributes(poolName, WorkloadKey.String(gated.DefaultWorkload))
		with := func(kv attribute.KeyValue) metric.ObserveOption {
			return metric.WithAttributes(poolName, WorkloadKey.String(gated.DefaultWorkload), kv)
		}
		ob.ObserveInt64(count, int64(s.Pool.Idle), idle)
		ob.ObserveInt64(count, int64(s.Pool.InUse), used)
		ob.ObserveInt64(maxConns, int64(s.Pool.MaxConns), poolOnly)
		ob.ObserveInt64(idleMax, int64(s.Pool.MaxConns), poolOnly)
		ob.ObserveInt64(pending, int64(s.Waiting), poolOnly)
		ob.ObserveInt64(timeouts, s.RejectedTimeout, poolOnly)

		ob.ObserveInt64(running, int64(s.Running), wl)
		ob.ObserveInt64(waiting, int64(s.Waiting), wl)
		ob.ObserveInt64(concurrent, int64(s.Concurrent), wl)
		ob.ObserveInt64(queue, int64(s.Queue), wl)
		ob.ObserveInt64(admitted, s.Admitted, wl)
		ob.ObserveInt64(rejected, s.RejectedFull, with(RejectReasonKey.String("full")))
		ob.ObserveInt64(rejected, s.RejectedTimeout, with(RejectReasonKey.String("timeout")))
		ob.ObserveInt64(canceled, s.Canceled, wl)
		ob.ObserveInt64(serverTimeouts, s.StatementTimeouts, with(TimeoutKindKey.String("statement")))
		ob.ObserveInt64(serverTimeouts, s.LockTimeouts, with(TimeoutKindKey.String("lock")))
		ob.ObserveInt64(commitUnknown, s.CommitUnknown, wl)

		ob.ObserveInt64(opened, s.Pool.Opened, poolOnly)
		for _, r := range [...]struct {
			reason gated.CloseReason
			n      int64
		}{
			{gated.CloseBroken, s.Pool.ClosedBroken},
			{gated.CloseLifetime, s.Pool.ClosedLifetime},
			{gated.CloseIdleTime, s.Pool.ClosedIdleTime},
			{gated.CloseDeadIdle, s.Pool.ClosedDeadIdle},
			{gated.CloseConnector, s.Pool.ClosedByClose},
		} {
			ob.ObserveInt64(closed, r.n, metric.WithAttributes(poolName, CloseReasonKey.String(r.reason.String())))
		}
		ob.ObserveInt64(connectErrors, s.Pool.ConnectErrors, poolOnly)
		ob.ObserveInt64(connectCanceled, s.Pool.ConnectCanceled, poolOnly)
		return nil
	}, insts...)
}
