package gated

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// An Observer receives gated's measurements as they happen: the durations of every admitted
// operation (wait, connect, hold) and of every call into the inner driver, and one event per
// refusal, cancellation, server-side timeout, unknown commit and physical connection opened,
// closed or failed. Put one in [Config.Observer], or attach one to a Connector already made
// (one from sql.Open, found with [FromDB]) with [Connector.Attach]; gatedprom and gatedotel
// (modules of their own) attach theirs and turn the events into Prometheus and OpenTelemetry
// metrics and trace events.
//
// Observe is called synchronously on the goroutine of the operation (or of the pool's background
// work), outside every lock of gated, from many goroutines at once: it must be safe for
// concurrent use, fast and non-blocking, because it runs on the path of every database call. gated
// passes the Event by value and allocates nothing to call it; an Observer that wants the same
// of itself must not retain e.Err or e.Context.
//
// The counters among the events are also in [Stats], exactly; an Observer is for what Stats
// cannot hold, distributions of durations, or for systems that count events themselves.
type Observer interface {
	Observe(e Event)
}

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// An Event is one measurement. Which fields are set depends on Kind (see the EventKind
// constants); the others are zero.
type Event struct {
	Kind     EventKind
	Workload string        // the gate's workload ("default" for gate_concurrent's); "" for connection events, which belong to the shared pool
	Duration time.Duration // EventAdmitted, EventConnect, EventHold, EventStatement, EventConnOpened
	Reason   CloseReason   // EventConnClosed
	Err      error         // EventRejectedFull and EventRejectedTimeout (a *RejectedError), EventCanceled, EventConnect (when it failed), EventStatement (when it failed), EventConnectFailed, EventConnectCanceled, EventCommitUnknown

	// Context is the context of the operation the event belongs to, for reading what it
	// carries (a trace's span, say) and never to be retained: the operation's own for the gate's
	// events (EventAdmitted to EventConnect), EventStatement (except Commit and Rollback, which
	// have none: nil) and the pool's events of an attempt made for it (EventConnOpened,
	// EventConnectFailed, EventConnectCanceled); the context that began the binding for
	// EventHold and EventCommitUnknown; nil for EventConnClosed and the server-side timeouts.
	Context context.Context
}

// An EventKind says what an [Event] measured.
type EventKind uint8

// The kinds of [Event]. Each attempt to pass a gate yields exactly one of EventAdmitted,
// EventRejectedFull, EventRejectedTimeout and EventCanceled, matching the Stats counters of the
// same names. An admitted operation yields one EventConnect (unless its context had already
// ended when the permit came, and it gave the permit straight back), and when that succeeded
// one EventHold when its binding ends.
const (
	// EventAdmitted: the operation got its execution permit. Duration is the time it waited
	// for it, from arriving at the gate (0 when a permit was free at once, up to
	// gate_queue_wait); Stats.WaitDuration adds up the same waits measured inside the gate.
	EventAdmitted EventKind = iota + 1
	// EventRejectedFull: refused at once with ErrAdmissionFull.
	EventRejectedFull
	// EventRejectedTimeout: refused with ErrAdmissionTimeout.
	EventRejectedTimeout
	// EventCanceled: the context ended while the operation waited, or Close ended the wait.
	EventCanceled
	// EventConnect: the admitted operation got its physical connection ready (an idle one
	// checked and reset, or a new one opened). Duration is from the execution permit to then;
	// Err is set when no connection could be had.
	EventConnect
	// EventHold: a binding ended. Duration is from the execution permit to the end of the
	// binding (Commit/Rollback, rows.Close, the end of a pinned *sql.Conn): what the permit
	// cost. Hold time rising while statement time stays flat means the application holds
	// permits between statements.
	EventHold
	// EventStatement: one call into the inner driver (prepare, exec, query, begin, commit,
	// rollback, ping) returned. Duration is the time inside it; for a query, until the first
	// result, not until rows.Close. Err is its error, if any.
	EventStatement
	// EventStatementTimeout: a statement failed with SQLSTATE 57014 (query_canceled) while its
	// context was still alive: statement_timeout, or pg_cancel_backend by someone else.
	EventStatementTimeout
	// EventLockTimeout: a statement failed with SQLSTATE 55P03 (lock_not_available):
	// lock_timeout, or NOWAIT.
	EventLockTimeout
	// EventCommitUnknown: Commit failed with ErrCommitUnknown; Err is the error returned.
	EventCommitUnknown
	// EventConnOpened: a physical connection was opened. Duration is the inner driver's
	// Connect call.
	EventConnOpened
	// EventConnectFailed: opening a physical connection failed for the server's or the
	// network's reasons, not because the caller's context ended (also after the caller left: the
	// attempt goes on for the pool).
	EventConnectFailed
	// EventConnectCanceled: the caller's context ended while a physical connection was being
	// got ready for its operation (opened, or an idle one checked before reuse): it was canceled,
	// or its deadline passed, whatever error the driver reported for that. A connection being
	// opened goes on opening for the pool: EventConnOpened or EventConnectFailed follows.
	EventConnectCanceled
	// EventConnClosed: a physical connection was closed, for Reason.
	EventConnClosed
)

var eventKindNames = [...]string{
	EventAdmitted: "admitted", EventRejectedFull: "rejected_full", EventRejectedTimeout: "rejected_timeout",
	EventCanceled: "canceled", EventConnect: "connect", EventHold: "hold", EventStatement: "statement",
	EventStatementTimeout: "statement_timeout", EventLockTimeout: "lock_timeout",
	EventCommitUnknown: "commit_unknown", EventConnOpened: "conn_opened",
	EventConnectFailed: "connect_failed", EventConnectCanceled: "connect_canceled", EventConnClosed: "conn_closed",
}

// String returns the kind's name in snake case, such as "rejected_full".
func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && eventKindNames[k] != "" {
		return eventKindNames[k]
	}
	return "unknown"
}

// DefaultWorkload is the workload name of the gate configured by gate_concurrent, gate_queue and
// gate_queue_wait, the one [Connector.Stats] describes; events of its operations carry it.
const DefaultWorkload = "default"

// observer is the sink for a gate set's measurements: the Observers attached to it (the first
// Config's Observer, then those of Connector.Attach) and the Logger of its first Config.
// Nothing attached is the common case, and every method checks that first, inline, so that
// recording costs one atomic load then. Counters that Stats reports are kept by the gate and
// the pool whatever is attached.
type observer struct {
	sinks   atomic.Pointer[[]*attachment] // nil when none is attached; a stored slice is never modified
	mu      sync.Mutex                    // serializes attach and detach
	log     *slog.Logger
	dsn     string     // to redact passwords from connection errors before logging them
	connLog summarizer // connection failures
}

// An attachment is one Observer attached; its address tells attachments of one Observer apart.
type attachment struct{ o Observer }

// attached reports whether an Observer is attached.
func (o *observer) attached() bool { return o.sinks.Load() != nil }

// emit sends e to every attached Observer, in the order they were attached.
func (o *observer) emit(e Event) {
	if l := o.sinks.Load(); l != nil {
		for _, a := range *l {
			a.o.Observe(e)
		}
	}
}

// attach adds x to the Observers and returns the function that removes it again, which is
// idempotent.
func (o *observer) attach(x Observer) (detach func()) {
	a := &attachment{x}
	o.mu.Lock()
	defer o.mu.Unlock()
	var l []*attachment
	if old := o.sinks.Load(); old != nil {
		l = append(l, *old...)
	}
	l = append(l, a)
	o.sinks.Store(&l)
	return func() { o.detach(a) }
}

func (o *observer) detach(a *attachment) {
	o.mu.Lock()
	defer o.mu.Unlock()
	old := o.sinks.Load()
	if old == nil {
		return
	}
	var l []*attachment
	for _, b := range *old {
		if b != a {
			l = append(l, b)
		}
	}
	if len(l) == 0 {
		o.sinks.Store(nil)
	} else {
		o.sinks.Store(&l)
	}
}

// initObserve attaches the Config's Observer and Logger to the set's gates and pool. Connectors
// that share the set by gate_name share its observer: the first Config's Observer and Logger,
// and every Observer attached to any of them.
func (set *gateSet) initObserve(cfg *Config) {
	set.obs.log, set.obs.dsn = cfg.Logger, cfg.DSN
	if cfg.Observer != nil {
		set.obs.attach(cfg.Observer)
	}
	set.obs.connLog.write = set.obs.logConnectFailures
	set.pool.obs = &set.obs
	for _, g := range set.gates() {
		g.wl.refusals.write = func(n [2]int64, _ error) { set.obs.logRefusals(g.name, n) }
	}
}

// closeObserve writes the log lines still pending, so that nothing is lost and no timer outlives
// the set.
func (set *gateSet) closeObserve() {
	for _, g := range set.gates() {
		g.wl.refusals.stop()
	}
	set.obs.connLog.stop()
}

// monoBase is the origin of monoNow.
var monoBase = time.Now()

// monoNow returns the monotonic clock as a duration since monoBase: one clock reading, where
// time.Now takes two (wall and monotonic), and a measurement point is on every operation's path.
// It is never 0 once the program runs, so 0 can stand for "not measured".
func monoNow() time.Duration { return time.Since(monoBase) }

// now returns the monotonic time (monoNow) when an Observer is attached, and 0 otherwise.
func (o *observer) now() time.Duration {
	if !o.attached() {
		return 0
	}
	return monoNow()
}

// since returns the time from start (from now) until now, or 0 when start was not measured
// (the Observer was attached while the operation ran).
func since(start time.Duration) time.Duration {
	if start == 0 {
		return 0
	}
	return monoNow() - start
}

// acquired records how gate g answered an operation that arrived at start (from now) under
// ctx: err is what g.acquire returned. It returns the time the execution permit was granted
// when an Observer is attached, for connected and held.
func (o *observer) acquired(g *gate, start time.Duration, ctx context.Context, err error) time.Duration {
	if !o.attached() && o.log == nil {
		return 0
	}
	return o.acquiredSlow(g, start, ctx, err)
}

func (o *observer) acquiredSlow(g *gate, start time.Duration, ctx context.Context, err error) time.Duration {
	var kind EventKind
	switch err {
	case nil:
		if !o.attached() {
			return 0
		}
		now := monoNow()
		d := time.Duration(0)
		if start != 0 {
			d = now - start
		}
		o.emit(Event{Kind: EventAdmitted, Workload: g.wl.name, Duration: d, Context: ctx})
		return now
	case g.wl.full:
		kind = EventRejectedFull
		if o.log != nil {
			g.wl.refusals.add(0, nil)
		}
	case g.wl.timeout:
		kind = EventRejectedTimeout
		if o.log != nil {
			g.wl.refusals.add(1, nil)
		}
	default:
		kind = EventCanceled
	}
	o.emit(Event{Kind: kind, Workload: g.wl.name, Err: err, Context: ctx})
	return 0
}

// connected records the end of binding.ready for an operation whose permit was granted at start.
func (o *observer) connected(g *gate, start time.Duration, ctx context.Context, err error) {
	if o.attached() {
		o.emit(Event{Kind: EventConnect, Workload: g.wl.name, Duration: since(start), Err: err, Context: ctx})
	}
}

// held records the end of a binding, begun under ctx, whose permit was granted at start.
func (o *observer) held(g *gate, start time.Duration, ctx context.Context) {
	if o.attached() {
		o.emit(Event{Kind: EventHold, Workload: g.wl.name, Duration: since(start), Context: ctx})
	}
}

// statement records one call into the inner driver that began at start (from now) and returned
// err, under ctx (nil for Commit and Rollback, which have none). It counts the server-side
// timeouts in g's Stats whether or not an Observer is attached.
func (o *observer) statement(g *gate, start time.Duration, ctx context.Context, err error) {
	if !o.attached() && err == nil {
		return
	}
	o.statementSlow(g, start, ctx, err)
}

func (o *observer) statementSlow(g *gate, start time.Duration, ctx context.Context, err error) {
	name := ""
	if g != nil {
		name = g.wl.name
	}
	o.emit(Event{Kind: EventStatement, Workload: name, Duration: since(start), Err: err, Context: ctx})
	if err == nil || g == nil {
		return
	}
	var kind EventKind
	switch sqlState(err) {
	case "57014":
		// A query_canceled while the caller still waits was not caused by its context:
		// statement_timeout (or someone's pg_cancel_backend) ended it.
		if ctx != nil && ctx.Err() != nil {
			return
		}
		g.wl.statementTimeouts.Add(1)
		kind = EventStatementTimeout
	case "55P03":
		g.wl.lockTimeouts.Add(1)
		kind = EventLockTimeout
	default:
		return
	}
	o.emit(Event{Kind: kind, Workload: name})
}

// commitUnknown records a Commit, in a binding begun under ctx, that failed with err, wrapping
// ErrCommitUnknown. It is always logged: somebody has to find out whether the transaction was
// applied.
func (o *observer) commitUnknown(g *gate, ctx context.Context, err error) {
	name := ""
	if g != nil {
		name = g.wl.name
		g.wl.commitUnknown.Add(1)
	}
	if o.log != nil {
		o.log.Error("gated: commit outcome unknown: the connection was lost after COMMIT was sent",
			slog.String("workload", name), slog.String("error", redact(err.Error(), o.dsn)))
	}
	o.emit(Event{Kind: EventCommitUnknown, Workload: name, Err: err, Context: ctx})
}

// dialed records an attempt to open a physical connection for an operation under ctx that
// began at start (from now) and returned err; canceled is callerEnded's verdict on it. The pool
// counts it in its Stats itself (countDialFailureLocked). Only the server's or the network's
// failures are logged: an operator can do nothing about a caller's short deadline.
func (o *observer) dialed(start time.Duration, ctx context.Context, canceled bool, err error) {
	if !o.attached() && (err == nil || canceled || o.log == nil) {
		return
	}
	switch {
	case err == nil:
		o.emit(Event{Kind: EventConnOpened, Duration: since(start), Context: ctx})
	case canceled:
		o.emit(Event{Kind: EventConnectCanceled, Err: err, Context: ctx})
	default:
		if o.log != nil {
			o.connLog.add(0, err)
		}
		o.emit(Event{Kind: EventConnectFailed, Err: err, Context: ctx})
	}
}

// checkCanceled records a reuse check of an idle connection that the caller's context cut
// short (err is the check's error): counted with the canceled attempts.
func (o *observer) checkCanceled(ctx context.Context, err error) {
	if o.attached() {
		o.emit(Event{Kind: EventConnectCanceled, Err: err, Context: ctx})
	}
}

// connClosed records the close of a physical connection.
func (o *observer) connClosed(r CloseReason) {
	if o.attached() {
		o.emit(Event{Kind: EventConnClosed, Reason: r})
	}
}
