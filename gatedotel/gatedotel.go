// Package gatedotel exports a gated [gated.Connector] to OpenTelemetry: metrics following the
// semantic conventions for database client connection pools plus the gate's own instruments, for
// every workload, and gated's part of each operation on the span its context carries. A service
// configured only by its DSN needs nothing else:
//
//	db, err := sql.Open("gated", dsn) // dsn with gate_workloads=batch:2:2, say
//	...
//	c, _ := gated.FromDB(db)
//	obs, err := gatedotel.NewObserver(gatedotel.WithMeterProvider(mp), gatedotel.WithPoolName("shop"))
//	...
//	reg, err := obs.Register(c) // attaches obs to c and registers the asynchronous instruments
//	defer reg.Unregister()      // detaches it again
//
// # Traces
//
// When an operation's context carries a recording span (otelhttp's server span, otelsql's
// client span, or your own), the Observer adds gated's part to it, as span events rather than
// child spans: an event costs one small allocation on a span already being recorded, where a
// child span costs a span of its own and its export on every database call, and Jaeger and
// Tempo show an event as a timestamped log line on the span the user already looks at (its
// attributes searchable in TraceQL). The events:
//
//   - gated.admitted, when the execution permit was granted, with gated.workload and
//     gated.wait (the seconds from arriving at the gate); the span also gets gated.workload.
//   - gated.rejected, with gated.workload and gated.rejected.reason (full | timeout |
//     displaced); the span also gets both attributes, so that refused requests can be found by
//     attribute.
//   - gated.canceled, when the context ended while the operation waited.
//   - gated.commit_unknown, with gated.workload, when Commit failed with ErrCommitUnknown; the
//     error is recorded on the span (RecordError) and its status set to Error: somebody has to
//     find out whether the transaction was applied.
//
// A context without a recording span costs one context lookup and no allocation. Turn the
// trace events off with [WithoutTraces].
//
// # Metrics
//
// The names follow semantic conventions v1.43.0 (the Go module
// go.opentelemetry.io/otel/semconv/v1.43.0, model/db/metrics.yaml of
// open-telemetry/semantic-conventions). The duration of each call into the inner driver (a
// query until its first result, an exec, a prepare, a begin, commit or rollback, a ping) is the
// stable db.client.operation.duration, or gated's own gated.statement.duration, or both, as
// OTEL_SEMCONV_STABILITY_OPT_IN ([StabilityOptInEnv]) says when NewObserver runs, the way otelsql
// reads it:
//
//   - unset, or neither value below: gated.statement.duration only, as before the stable name;
//   - "database": db.client.operation.duration only;
//   - "database/dup": both.
//
// db.client.operation.duration (s, the conventions' buckets 0.001 to 10) has db.system.name
// (postgresql for pgx and lib/pq, mysql for go-sql-driver/mysql, other_sql otherwise),
// server.address and server.port (the first host of the Connector's DSN, when it names one;
// nothing else of the DSN is read, never a user or password), and for a failed call error.type:
// the SQLSTATE (then also db.response.status_code), context.Canceled or
// context.DeadlineExceeded, driver.ErrBadConn, or the error's Go type. db.operation.name is left
// out: gated does not parse the SQL. Like gated.statement.duration it also carries
// db.client.connection.pool.name and gated.workload. The server's attributes are read by
// Register; an operation recorded before it has none of them.
//
// The connection-pool metrics are still in development in the conventions, and are exported
// whatever OTEL_SEMCONV_STABILITY_OPT_IN says:
//
//   - db.client.connection.count ({connection}, by db.client.connection.state = idle | used):
//     the physical pool's idle and in-use connections.
//   - db.client.connection.max and db.client.connection.idle.max ({connection}): P (gated keeps
//     up to P idle).
//   - db.client.connection.pending_requests ({request}): operations waiting for an execution
//     permit, which in gated is the only wait for a connection.
//   - db.client.connection.timeouts ({timeout}): refusals with ErrAdmissionTimeout (the other
//     reasons, full and displaced, are counted in gated.rejected only).
//   - db.client.connection.create_time (s): opening one physical connection.
//   - db.client.connection.wait_time (s): arrival at the gate to the execution permit.
//   - db.client.connection.use_time (s): the permit to the end of the binding (hold time).
//
// Every one has db.client.connection.pool.name (the pool name, default "gated"); the wait and
// use times and all of the gate's own instruments also carry gated.workload. The gate's own:
// gated.running, gated.waiting, gated.concurrent.limit (B; with gate_concurrent=auto the
// current limit, in a fleet this instance's share), gated.queue.limit, gated.lent (permits lent
// to other workloads now) and gated.borrowed (operations on a borrowed permit now)
// ({operation}); gated.admitted, gated.rejected (by gated.rejected.reason = full | timeout |
// displaced, every [gated.RejectReason] name), gated.canceled ({operation});
// gated.server_timeouts (by gated.server_timeout.kind = statement | lock), gated.commit_unknown;
// gated.connect.duration and gated.statement.duration (s, above); and for the pool
// gated.connections.opened, gated.connections.closed (by gated.close.reason, every
// [gated.CloseReasons] name), gated.connect.errors and gated.connect.canceled.
//
// In a fleet (gate_fleet=on), and only there, the instance's place in it ([gated.FleetStats]):
// gated.fleet.members ({instance}), gated.fleet.connections.share and
// gated.fleet.connections.total_limit ({connection}), per workload
// gated.fleet.concurrent.total_limit and gated.fleet.queue.total_limit ({operation}),
// gated.fleet.seated (1 while the instance holds a share, else 0; summed over the instances, how
// many are seated), gated.fleet.schema_missing (1 while the fleet's table or functions are
// missing and the role may not create them), and the counters gated.fleet.share_changes and
// gated.fleet.refresh_errors.
// Outside a fleet they have no points, so that an alert on gated.fleet.seated = 0 fires only for
// an instance of a fleet. Every workload of the Connector
// ([gated.Connector.AllStats]) has its series, present from the first collection;
// db.client.connection.pending_requests and db.client.connection.timeouts add up all workloads.
// Counters are read from Stats, so they equal it exactly.
package gatedotel

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/obsexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// The instrumentation scope.
const scopeName = "github.com/gatedsql/gated/gatedotel"

// The attribute keys gated adds beside the semantic conventions'.
const (
	WorkloadKey     = attribute.Key("gated.workload")            // the gate's workload, "default" for gate_concurrent's
	RejectReasonKey = attribute.Key("gated.rejected.reason")     // gated.RejectReason's String: "full", "timeout" or "displaced"
	TimeoutKindKey  = attribute.Key("gated.server_timeout.kind") // "statement" or "lock"
	CloseReasonKey  = attribute.Key("gated.close.reason")        // gated.CloseReason's String
	WaitKey         = attribute.Key("gated.wait")                // on the gated.admitted span event: seconds from arriving at the gate to the execution permit
)

// The names of the span events the Observer adds (see the package documentation).
const (
	EventAdmitted      = "gated.admitted"
	EventRejected      = "gated.rejected"
	EventCanceled      = "gated.canceled"
	EventCommitUnknown = "gated.commit_unknown"
)

const (
	defaultPoolName = "gated"
	secondsUnit     = "s"
	connectionUnit  = "{connection}"
	operationUnit   = "{operation}"
	instanceUnit    = "{instance}"
	requestUnit     = "{request}"
	timeoutUnit     = "{timeout}"
)

// An Option configures [NewObserver].
type Option func(*options)

type options struct {
	mp       metric.MeterProvider
	poolName string
	noTraces bool
}

// WithMeterProvider sets the MeterProvider (default otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.mp = mp } }

// WithPoolName sets db.client.connection.pool.name (default "gated"). Give each Connector of a
// process its own.
func WithPoolName(name string) Option { return func(o *options) { o.poolName = name } }

// WithoutTraces stops the Observer from adding events to the spans of operations' contexts.
func WithoutTraces() Option { return func(o *options) { o.noTraces = true } }

// An Observer records gated's durations into OpenTelemetry histograms, adds gated's part of an
// operation to the span in its context, and, once [Observer.Register] is called, reports a
// Connector's gauges and counters for every workload. Register attaches it to the Connector
// (unless it is already the Connector's Config.Observer), so a Connector made by sql.Open from a
// DSN gets everything. It is safe for concurrent use and takes no lock on the path of an
// operation.
type Observer struct {
	meter    metric.Meter
	poolName string
	pool     []metric.RecordOption // the pool attribute, precomputed
	traces   bool

	waitTime, useTime, createTime metric.Float64Histogram
	connectTime                   metric.Float64Histogram
	statementTime                 metric.Float64Histogram // gated.statement.duration; nil when StabilityOptInEnv asks for the stable name only
	operationTime                 metric.Float64Histogram // db.client.operation.duration; nil unless StabilityOptInEnv asks for it

	workloads  *obsexport.Workloads[*workloadAttrs]
	operations atomic.Pointer[obsexport.Workloads[*operationAttrs]] // db.client.operation.duration's attributes, the server's from Register on
}

// workloadAttrs are one workload's attributes, precomputed.
type workloadAttrs struct {
	record   []metric.RecordOption                         // pool name and workload, for the histograms
	observe  metric.ObserveOption                          // the same, for the asynchronous instruments
	name     attribute.KeyValue                            // gated.workload alone, for spans
	rejected [gated.RejectDisplaced + 1]attribute.KeyValue // gated.rejected.reason by gated.RejectReason
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
	obs := &Observer{meter: o.mp.Meter(scopeName), poolName: o.poolName, traces: !o.noTraces}
	poolName := semconv.DBClientConnectionPoolName(o.poolName)
	obs.pool = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(poolName))}
	obs.workloads = obsexport.NewWorkloads(func(name string) *workloadAttrs {
		set := attribute.NewSet(poolName, WorkloadKey.String(name))
		return &workloadAttrs{
			record:  []metric.RecordOption{metric.WithAttributeSet(set)},
			observe: metric.WithAttributeSet(set),
			name:    WorkloadKey.String(name),
			rejected: [...]attribute.KeyValue{
				gated.RejectFull:      RejectReasonKey.String(gated.RejectFull.String()),
				gated.RejectTimeout:   RejectReasonKey.String(gated.RejectTimeout.String()),
				gated.RejectDisplaced: RejectReasonKey.String(gated.RejectDisplaced.String()),
			},
		}
	})
	obs.operations.Store(obsexport.NewWorkloads(newOperationAttrs([]attribute.KeyValue{poolName})))
	buckets := obsexport.Buckets()
	names := stabilityOptIn()
	for _, h := range []struct {
		dst        *metric.Float64Histogram
		name, desc string
		buckets    []float64
		make       bool
	}{
		{&obs.waitTime, "db.client.connection.wait_time", "The time it took to obtain an open connection from the pool: arrival at the gate to the execution permit.", buckets, true},
		{&obs.useTime, "db.client.connection.use_time", "The time between borrowing a connection and returning it to the pool: the execution permit to the end of the binding.", buckets, true},
		{&obs.createTime, "db.client.connection.create_time", "The time it took to create a new connection.", buckets, true},
		{&obs.connectTime, "gated.connect.duration", "The execution permit to a ready physical connection (reuse check, reset or dial).", buckets, true},
		{&obs.statementTime, "gated.statement.duration", "Time inside each call into the inner driver.", buckets, names.earlier},
		{&obs.operationTime, "db.client.operation.duration", "Duration of database client operations: each call into the inner driver.", operationBuckets, names.stable},
	} {
		if !h.make {
			continue
		}
		var err error
		if *h.dst, err = obs.meter.Float64Histogram(h.name, metric.WithUnit(secondsUnit), metric.WithDescription(h.desc), metric.WithExplicitBucketBoundaries(h.buckets...)); err != nil {
			return nil, err
		}
	}
	return obs, nil
}

// Observe records e in its histogram, and gated's part of the operation on the span of
// e.Context; the counters are read from Stats by Register's callback.
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
		if o.operationTime != nil {
			o.recordOperation(ctxOf(e), e)
		}
		if h = o.statementTime; h == nil {
			return
		}
	case gated.EventConnOpened:
		o.createTime.Record(ctxOf(e), e.Duration.Seconds(), o.pool...)
		return
	case gated.EventRejectedFull, gated.EventRejectedTimeout, gated.EventRejectedDisplaced, gated.EventCanceled, gated.EventCommitUnknown:
		if o.traces {
			o.trace(e)
		}
		return
	default:
		return
	}
	w := o.workloads.Get(e.Workload)
	// The operation's context, so that an exemplar can link the measurement to its trace.
	h.Record(ctxOf(e), e.Duration.Seconds(), w.record...)
	if e.Kind == gated.EventAdmitted && o.traces {
		o.trace(e)
	}
}

// ctxOf is the event's context, or Background for events without one.
func ctxOf(e gated.Event) context.Context {
	if e.Context == nil {
		return context.Background()
	}
	return e.Context
}

// rejectReason is the reason of a refusal event of kind k.
func rejectReason(k gated.EventKind) gated.RejectReason {
	switch k {
	case gated.EventRejectedTimeout:
		return gated.RejectTimeout
	case gated.EventRejectedDisplaced:
		return gated.RejectDisplaced
	}
	return gated.RejectFull
}

// trace adds e to the recording span of its context, if any.
func (o *Observer) trace(e gated.Event) {
	if e.Context == nil {
		return
	}
	span := trace.SpanFromContext(e.Context)
	if !span.IsRecording() {
		return
	}
	o.traceSlow(span, e)
}

func (o *Observer) traceSlow(span trace.Span, e gated.Event) {
	w := o.workloads.Get(e.Workload)
	switch e.Kind {
	case gated.EventAdmitted:
		span.SetAttributes(w.name)
		span.AddEvent(EventAdmitted, trace.WithAttributes(w.name, WaitKey.Float64(e.Duration.Seconds())))
	case gated.EventRejectedFull, gated.EventRejectedTimeout, gated.EventRejectedDisplaced:
		reason := rejectReason(e.Kind)
		span.SetAttributes(w.name, w.rejected[reason])
		span.AddEvent(EventRejected, trace.WithAttributes(w.name, w.rejected[reason]))
	case gated.EventCanceled:
		span.AddEvent(EventCanceled, trace.WithAttributes(w.name))
	case gated.EventCommitUnknown:
		span.AddEvent(EventCommitUnknown, trace.WithAttributes(w.name))
		if e.Err != nil {
			span.RecordError(e.Err, trace.WithTimestamp(time.Now()))
		}
		span.SetStatus(codes.Error, "gated: commit outcome unknown")
	}
}

// A registration is Register's result: the callback's and the attachment's undoing.
type registration struct {
	metric.Registration
	detach func()
}

// Unregister unregisters the callback and detaches the Observer from the Connector.
func (r registration) Unregister() error {
	r.detach()
	return r.Registration.Unregister()
}

// Register attaches o to c ([gated.Connector.Attach]; not when o is c's Config().Observer
// already) and registers the asynchronous instruments that read c.AllStats() at every
// collection: the semantic conventions' counts, limits, pending requests and timeouts, and the
// gate's own gauges and counters for every workload. Call Unregister on the result to stop
// both. Register an Observer with one Connector, and give each Connector of a process an
// Observer of its own with its own pool name. Observers attached side by side each get every
// event (gated fans them out), so an o that c's Config.Observer reaches some other way (a
// function calling it) would see every event twice: put o itself in Config.Observer, or
// nothing.
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
	concurrent := udc("gated.concurrent.limit", operationUnit, "B: execution permits; with gate_concurrent=auto the current limit, in a fleet this instance's share.")
	queue := udc("gated.queue.limit", operationUnit, "Q: admission permits beyond B; in a fleet this instance's share.")
	lent := udc("gated.lent", operationUnit, "Execution permits of the workload held now by other workloads' operations (the workload option lend).")
	borrowed := udc("gated.borrowed", operationUnit, "Operations counted in gated.running that hold a permit lent by another workload.")
	admitted := ctr("gated.admitted", operationUnit, "Operations that got an execution permit.")
	rejected := ctr("gated.rejected", operationUnit, "Operations refused: full (at once), timeout (after gate_queue_wait) or displaced (while waiting, by a caller of higher priority or of a tenant with fewer waiters).")
	canceled := ctr("gated.canceled", operationUnit, "Operations whose context ended while they waited.")
	serverTimeouts := ctr("gated.server_timeouts", "{statement}", "Statements the server ended: statement (57014) or lock (55P03) timeout.")
	commitUnknown := ctr("gated.commit_unknown", "{commit}", "Commits whose outcome is unknown.")
	opened := ctr("gated.connections.opened", connectionUnit, "Physical connections opened.")
	closed := ctr("gated.connections.closed", connectionUnit, "Physical connections closed, by reason.")
	connectErrors := ctr("gated.connect.errors", "{attempt}", "Attempts to open a connection that failed before the caller's context ended: the server's or network's failures.")
	connectCanceled := ctr("gated.connect.canceled", "{attempt}", "Attempts to get a connection ready (dial or reuse check) cut short by the caller's context or deadline.")
	fleetMembers := udc("gated.fleet.members", instanceUnit, "Live instances of the fleet (gate_fleet=on) as the last successful refresh saw them, this one included.")
	fleetConns := udc("gated.fleet.connections.share", connectionUnit, "This instance's share of the fleet's working connections (its lease connection is one more, outside it); 0 while it joins or is fenced.")
	fleetTotalConns := udc("gated.fleet.connections.total_limit", connectionUnit, "The fleet's gate_max_conns: the connections of all its instances together.")
	fleetConcurrent := udc("gated.fleet.concurrent.total_limit", operationUnit, "The fleet's B of the workload: execution permits of all its instances together.")
	fleetQueue := udc("gated.fleet.queue.total_limit", operationUnit, "The fleet's Q of the workload: admission permits beyond B of all its instances together.")
	fleetSeated := udc("gated.fleet.seated", instanceUnit, "1 while this instance holds a share of the fleet's connections, else 0 (it refuses every operation).")
	fleetShareChanges := ctr("gated.fleet.share_changes", "{change}", "Times this instance's share of the fleet changed.")
	fleetRefreshErrors := ctr("gated.fleet.refresh_errors", "{refresh}", "Lease refreshes of this instance that failed (the share is kept, never grown, until it is fenced).")
	fleetSchemaMissing := udc("gated.fleet.schema_missing", instanceUnit, "1 while the fleet's table or this version's functions are missing and this instance's role may not create them, else 0.")
	if err != nil {
		return nil, err
	}

	o.workloads.Prepare(c)
	operations := obsexport.NewWorkloads(newOperationAttrs(append([]attribute.KeyValue{semconv.DBClientConnectionPoolName(o.poolName)}, serverAttrs(c.Config())...)))
	operations.Prepare(c)
	o.operations.Store(operations)
	inFleet := c.Config().Fleet
	poolName := semconv.DBClientConnectionPoolName(o.poolName)
	poolOnly := metric.WithAttributes(poolName)
	idle := metric.WithAttributes(poolName, semconv.DBClientConnectionStateIdle)
	used := metric.WithAttributes(poolName, semconv.DBClientConnectionStateUsed)
	reg, err := m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		var pool gated.PoolStats
		var fleet gated.FleetStats
		var allWaiting, allTimeouts int64
		for name, s := range c.AllStats() {
			pool, fleet = s.Pool, s.Fleet
			allWaiting += int64(s.Waiting)
			allTimeouts += s.RejectedTimeout
			wl := o.workloads.Get(name).observe
			with := func(kv attribute.KeyValue) metric.ObserveOption {
				return metric.WithAttributes(poolName, WorkloadKey.String(name), kv)
			}
			ob.ObserveInt64(running, int64(s.Running), wl)
			ob.ObserveInt64(waiting, int64(s.Waiting), wl)
			ob.ObserveInt64(concurrent, int64(s.Concurrent), wl)
			ob.ObserveInt64(queue, int64(s.Queue), wl)
			ob.ObserveInt64(lent, int64(s.Lent), wl)
			ob.ObserveInt64(borrowed, int64(s.Borrowed), wl)
			if inFleet {
				ob.ObserveInt64(fleetConcurrent, int64(s.Fleet.TotalConcurrent), wl)
				ob.ObserveInt64(fleetQueue, int64(s.Fleet.TotalQueue), wl)
			}
			ob.ObserveInt64(admitted, s.Admitted, wl)
			for reason, n := range obsexport.Rejected(&s) {
				ob.ObserveInt64(rejected, n, with(RejectReasonKey.String(reason)))
			}
			ob.ObserveInt64(canceled, s.Canceled, wl)
			ob.ObserveInt64(serverTimeouts, s.StatementTimeouts, with(TimeoutKindKey.String("statement")))
			ob.ObserveInt64(serverTimeouts, s.LockTimeouts, with(TimeoutKindKey.String("lock")))
			ob.ObserveInt64(commitUnknown, s.CommitUnknown, wl)
		}
		ob.ObserveInt64(count, int64(pool.Idle), idle)
		ob.ObserveInt64(count, int64(pool.InUse), used)
		ob.ObserveInt64(maxConns, int64(pool.MaxConns), poolOnly)
		ob.ObserveInt64(idleMax, int64(pool.MaxConns), poolOnly)
		ob.ObserveInt64(pending, allWaiting, poolOnly)
		ob.ObserveInt64(timeouts, allTimeouts, poolOnly)
		ob.ObserveInt64(opened, pool.Opened, poolOnly)
		for reason, n := range obsexport.Closed(&pool) {
			ob.ObserveInt64(closed, n, metric.WithAttributes(poolName, CloseReasonKey.String(reason)))
		}
		ob.ObserveInt64(connectErrors, pool.ConnectErrors, poolOnly)
		ob.ObserveInt64(connectCanceled, pool.ConnectCanceled, poolOnly)
		if inFleet {
			ob.ObserveInt64(fleetMembers, int64(fleet.Members), poolOnly)
			ob.ObserveInt64(fleetConns, int64(fleet.Conns), poolOnly)
			ob.ObserveInt64(fleetTotalConns, int64(fleet.TotalConns), poolOnly)
			ob.ObserveInt64(fleetSeated, boolValue(fleet.Seated), poolOnly)
			ob.ObserveInt64(fleetShareChanges, fleet.ShareChanges, poolOnly)
			ob.ObserveInt64(fleetRefreshErrors, fleet.RefreshErrors, poolOnly)
			ob.ObserveInt64(fleetSchemaMissing, boolValue(fleet.SchemaMissing), poolOnly)
		}
		return nil
	}, insts...)
	if err != nil {
		return nil, err
	}
	detach := func() {}
	if cfgObs, _ := c.Config().Observer.(*Observer); cfgObs != o {
		detach = c.Attach(o)
	}
	return registration{Registration: reg, detach: detach}, nil
}

// boolValue is an instrument's value for a condition: 1 while it holds, else 0.
func boolValue(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
