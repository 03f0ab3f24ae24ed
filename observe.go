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
// closed or failed. Set it in [Config.Observer]; gatedprom and gatedotel (modules of their own)
// turn it into Prometheus and OpenTelemetry metrics.
//
// Observe is called synchronously on the goroutine of the operation (or of the pool's background
// work), outside every lock of gated, from many goroutines at once: it must be safe for
// concurrent use, fast and non-blocking, because it runs on the path of every database call. gated
// passes the Event by value and allocates nothing to call it; an Observer that wants the same
// of itself must not retain e.Err.
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
	Err      error         // EventConnect (when it failed), EventStatement (when it failed), EventConnectFailed, EventConnectCanceled, EventCommitUnknown
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
	// EventConnectFailed: opening a physical connection failed while the caller's context
	// was alive: the server's or the network's failure.
	EventConnectFailed
	// EventConnectCanceled: opening a physical connection was cut short because the caller's
	// context ended.
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

// A CloseReason says why a physical connection was closed.
type CloseReason uint8

// The reasons a physical connection is closed, counted in PoolStats.Closed* and reported with
// EventConnClosed.
const (
	// CloseBroken: unusable at the end of an operation (the driver closed it, it was left in a
	// transaction or busy, it failed or its context ended mid-statement).
	CloseBroken CloseReason = iota
	// CloseLifetime: older than gate_max_conn_lifetime.
	CloseLifetime
	// CloseIdleTime: idle longer than gate_max_conn_idle_time.
	CloseIdleTime
	// CloseDeadIdle: found dead when it was to be used (killed while idle, a server restart,
	// a failed session reset).
	CloseDeadIdle
	// CloseConnector: closed by the Connector's Close (by DB.Close).
	CloseConnector

	numCloseReasons = iota
)

var closedForNames = [numCloseReasons]string{"broken", "lifetime", "idle_time", "dead_idle", "close"}

// String returns the reason's name: "broken", "lifetime", "idle_time", "dead_idle" or "close".
func (r CloseReason) String() string {
	if int(r) < len(closedForNames) {
		return closedForNames[r]
	}
	return "unknown"
}

// DefaultWorkload is the workload name of the gate configured by gate_concurrent, gate_queue and
// gate_queue_wait, the one [Connector.Stats] describes; events of its operations carry it.
const DefaultWorkload = "default"

// refusalLogInterval is the shortest time between two log lines summarizing refusals of one
// workload, or connection failures.
const refusalLogInterval = time.Second

// observer is the Connector's sink for measurements: the Observer and the Logger of its Config.
// Both nil is the common case, and every method checks that first, inline, so that recording
// costs nothing then. Counters that Stats reports are kept by the gate and the pool whatever is
// attached.
type observer struct {
	o       Observer
	log     *slog.Logger
	dsn     string     // to redact passwords from connection errors before logging them
	connLog summarizer // connection failures
}

// initObserve attaches the Config's Observer and Logger to the set's gates and pool. Connectors
// that share the set by gate_name share its observer: the first Config's.
func (set *gateSet) initObserve(cfg *Config) {
	set.obs = observer{o: cfg.Observer, log: cfg.Logger, dsn: cfg.DSN}
	set.obs.connLog.write = set.obs.logConnectFailures
	set.pool.obs = &set.obs
	for _, g := range set.gates() {
		g.wl.name = g.name
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
func monoNow() time.Duration { return time.Since(monoBase) }

// now returns the monotonic time (monoNow) when an Observer is attached, and 0 otherwise.
func (o *observer) now() time.Duration {
	if o.o == nil {
		return 0
	}
	return monoNow()
}

// acquired records how gate g answered an operation that arrived at start (from now): err is
// what g.acquire returned. It returns the time the execution permit was granted when an Observer
// is attached, for connected and held.
func (o *observer) acquired(g *gate, start time.Duration, err error) time.Duration {
	if o.o == nil && o.log == nil {
		return 0
	}
	return o.acquiredSlow(g, start, err)
}

func (o *observer) acquiredSlow(g *gate, start time.Duration, err error) time.Duration {
	var kind EventKind
	switch err {
	case nil:
		if o.o == nil {
			return 0
		}
		now := monoNow()
		o.o.Observe(Event{Kind: EventAdmitted, Workload: g.wl.name, Duration: now - start})
		return now
	case ErrAdmissionFull:
		kind = EventRejectedFull
		if o.log != nil {
			g.wl.refusals.add(0, nil)
		}
	case ErrAdmissionTimeout:
		kind = EventRejectedTimeout
		if o.log != nil {
			g.wl.refusals.add(1, nil)
		}
	default:
		kind = EventCanceled
	}
	if o.o != nil {
		o.o.Observe(Event{Kind: kind, Workload: g.wl.name})
	}
	return 0
}

// connected records the end of binding.ready for an operation whose permit was granted at since.
func (o *observer) connected(g *gate, since time.Duration, err error) {
	if o.o != nil {
		o.o.Observe(Event{Kind: EventConnect, Workload: g.wl.name, Duration: monoNow() - since, Err: err})
	}
}

// held records the end of a binding whose permit was granted at since.
func (o *observer) held(g *gate, since time.Duration) {
	if o.o != nil {
		o.o.Observe(Event{Kind: EventHold, Workload: g.wl.name, Duration: monoNow() - since})
	}
}

// statement records one call into the inner driver that began at start (from now) and returned
// err, under ctx (nil for Commit and Rollback, which have none). It counts the server-side
// timeouts in g's Stats whether or not an Observer is attached.
func (o *observer) statement(g *gate, start time.Duration, ctx context.Context, err error) {
	if o.o == nil && err == nil {
		return
	}
	o.statementSlow(g, start, ctx, err)
}

func (o *observer) statementSlow(g *gate, start time.Duration, ctx context.Context, err error) {
	name := ""
	if g != nil {
		name = g.wl.name
	}
	if o.o != nil {
		o.o.Observe(Event{Kind: EventStatement, Workload: name, Duration: monoNow() - start, Err: err})
	}
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
	if o.o != nil {
		o.o.Observe(Event{Kind: kind, Workload: name})
	}
}

// commitUnknown records a Commit that failed with err, wrapping ErrCommitUnknown. It is always
// logged: somebody has to find out whether the transaction was applied.
func (o *observer) commitUnknown(g *gate, err error) {
	name := ""
	if g != nil {
		name = g.wl.name
		g.wl.commitUnknown.Add(1)
	}
	if o.log != nil {
		o.log.Error("gated: commit outcome unknown: the connection was lost after COMMIT was sent",
			slog.String("workload", name), slog.String("error", redact(err.Error(), o.dsn)))
	}
	if o.o != nil {
		o.o.Observe(Event{Kind: EventCommitUnknown, Workload: name, Err: err})
	}
}

// dialed records an attempt to open a physical connection that began at start (from now) and
// returned err under ctx. The pool counts it in its Stats itself (countDialFailureLocked).
func (o *observer) dialed(start time.Duration, ctx context.Context, err error) {
	if o.o == nil && (err == nil || o.log == nil) {
		return
	}
	switch {
	case err == nil:
		o.o.Observe(Event{Kind: EventConnOpened, Duration: monoNow() - start})
	case ctx.Err() != nil:
		if o.o != nil {
			o.o.Observe(Event{Kind: EventConnectCanceled, Err: err})
		}
	default:
		if o.log != nil {
			o.connLog.add(0, err)
		}
		if o.o != nil {
			o.o.Observe(Event{Kind: EventConnectFailed, Err: err})
		}
	}
}

// connClosed records the close of a physical connection.
func (o *observer) connClosed(r CloseReason) {
	if o.o != nil {
		o.o.Observe(Event{Kind: EventConnClosed, Reason: r})
	}
}

func (o *observer) logRefusals(workload string, n [2]int64) {
	o.log.Warn("gated: operations refused",
		slog.String("workload", workload), slog.Int64("full", n[0]), slog.Int64("timeout", n[1]))
}

func (o *observer) logConnectFailures(n [2]int64, last error) {
	o.log.Error("gated: opening a physical connection failed",
		slog.Int64("failures", n[0]), slog.String("last_error", redact(last.Error(), o.dsn)))
}

// workloadObs is a gate's part of observability: its name and the counters kept outside gate.mu,
// because they are counted where the gate's lock is not held.
type workloadObs struct {
	name              string
	statementTimeouts atomic.Int64
	lockTimeouts      atomic.Int64
	commitUnknown     atomic.Int64
	refusals          summarizer // counts[0] full, counts[1] timeout
}

// stats fills the counters of s that workloadObs keeps.
func (w *workloadObs) stats(s *Stats) {
	s.StatementTimeouts = w.statementTimeouts.Load()
	s.LockTimeouts = w.lockTimeouts.Load()
	s.CommitUnknown = w.commitUnknown.Load()
}

// countDialFailureLocked counts a failed attempt to open a connection: apart, when the caller's
// own context ended it, from the server's or network's failures, so that a short deadline on a
// healthy server does not look like an outage.
func (p *pool) countDialFailureLocked(ctx context.Context) {
	if ctx.Err() != nil {
		p.dialCanceled++
	} else {
		p.failed++
	}
}

// obsStatsLocked fills the counters of s kept for observability.
func (p *pool) obsStatsLocked(s *PoolStats) {
	s.ConnectCanceled = p.dialCanceled
	s.ClosedBroken = p.closedBy[CloseBroken]
	s.ClosedLifetime = p.closedBy[CloseLifetime]
	s.ClosedIdleTime = p.closedBy[CloseIdleTime]
	s.ClosedDeadIdle = p.closedBy[CloseDeadIdle]
	s.ClosedByClose = p.closedBy[CloseConnector]
}

// expiryReason says which limit an expired connection passed.
func (pc *physConn) expiryReason(now int64, lifetime time.Duration) CloseReason {
	if lifetime > 0 && time.Duration(now-pc.createdAt) >= lifetime {
		return CloseLifetime
	}
	return CloseIdleTime
}

// A summarizer turns events that can come by the thousand into at most one log line per
// refusalLogInterval: the first event is written at once, later ones are counted and written
// together when the interval has passed. Nothing is lost; stop writes what is pending.
type summarizer struct {
	write func(counts [2]int64, last error) // set before use

	mu      sync.Mutex
	counts  [2]int64
	lastErr error
	last    time.Time   // when the last line was written
	timer   *time.Timer // pending write, or nil
	stopped bool        // after stop, every event is written at once: no timer may outlive the Connector
}

func (s *summarizer) add(i int, err error) {
	s.mu.Lock()
	s.counts[i]++
	if err != nil {
		s.lastErr = err
	}
	if s.timer != nil {
		s.mu.Unlock()
		return
	}
	now := time.Now()
	if wait := s.last.Add(refusalLogInterval).Sub(now); wait > 0 && !s.stopped {
		s.timer = time.AfterFunc(wait, s.flush)
		s.mu.Unlock()
		return
	}
	counts, last := s.takeLocked(now)
	s.mu.Unlock()
	s.write(counts, last)
}

func (s *summarizer) flush() {
	s.mu.Lock()
	s.timer = nil
	if s.counts == [2]int64{} {
		s.mu.Unlock()
		return
	}
	counts, last := s.takeLocked(time.Now())
	s.mu.Unlock()
	s.write(counts, last)
}

func (s *summarizer) takeLocked(now time.Time) ([2]int64, error) {
	counts, last := s.counts, s.lastErr
	s.counts, s.lastErr, s.last = [2]int64{}, nil, now
	return counts, last
}

func (s *summarizer) stop() {
	s.mu.Lock()
	s.stopped = true
	if s.timer != nil && !s.timer.Stop() {
		// The timer fired and its flush is about to write the pending counts.
		s.mu.Unlock()
		return
	}
	s.timer = nil
	s.mu.Unlock()
	s.flush()
}
