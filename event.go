package gated

import (
	"context"
	"iter"
	"time"
)

// The vocabulary of gated's measurements: what an Event is, its kinds and which fields each
// sets. emit.go is the only code that builds one.

// An Event is one measurement. Which fields are set depends on Kind (see the EventKind
// constants); the others are zero.
type Event struct {
	Kind     EventKind
	Workload string        // the gate's workload ("default" for gate_concurrent's); "" for connection events, which belong to the shared pool
	Duration time.Duration // EventAdmitted, EventConnect, EventHold, EventStatement, EventConnOpened
	Reason   CloseReason   // EventConnClosed
	Err      error         // EventRejectedFull, EventRejectedTimeout and EventRejectedDisplaced (a *RejectedError), EventCanceled, EventConnect (when it failed), EventStatement (when it failed), EventConnectFailed, EventConnectCanceled, EventCommitUnknown

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
// EventRejectedFull, EventRejectedTimeout, EventRejectedDisplaced and EventCanceled, matching the
// Stats counters of the same names. An admitted operation yields one EventConnect (unless its
// context had already ended when the permit came, and it gave the permit straight back), and
// when that succeeded one EventHold when its binding ends.
const (
	// EventAdmitted: the operation got its execution permit. Duration is the time it waited
	// for it, from arriving at the gate: up to gate_queue_wait, and when a permit was free at
	// once the time to pass the gate, well under a microsecond (0 when the Observer was
	// attached after the operation arrived); Stats.WaitDuration adds up the waits of the
	// operations that queued, measured inside the gate.
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
	// EventRejectedDisplaced: refused with ErrAdmissionDisplaced while it waited: an arrival of
	// a higher priority or of a tenant with fewer waiters took its place.
	EventRejectedDisplaced
)

var eventKindNames = [...]string{
	EventAdmitted: "admitted", EventRejectedFull: "rejected_full", EventRejectedTimeout: "rejected_timeout",
	EventCanceled: "canceled", EventConnect: "connect", EventHold: "hold", EventStatement: "statement",
	EventStatementTimeout: "statement_timeout", EventLockTimeout: "lock_timeout",
	EventCommitUnknown: "commit_unknown", EventConnOpened: "conn_opened",
	EventConnectFailed: "connect_failed", EventConnectCanceled: "connect_canceled", EventConnClosed: "conn_closed",
	EventRejectedDisplaced: "rejected_displaced",
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
	// CloseDeadIdle: found dead when it was to be used, before the caller's context ended: the
	// server or the network had closed it while it was idle (a backend terminated, a server
	// restart or failover), or its session reset failed.
	CloseDeadIdle
	// CloseConnector: closed by the Connector's Close (by DB.Close).
	CloseConnector
	// CloseCanceled: its check before reuse, or a statement that never reached the server, was
	// cut short by the caller's context (canceled, or its deadline passed), which leaves the
	// connection in a state gated cannot trust. Nothing was wrong with the server.
	CloseCanceled
	// CloseShrunk: closed because the pool's share of a fleet's connections shrank
	// (gate_fleet=on): idle at once, in use when its operation ended.
	CloseShrunk

	numCloseReasons = iota
)

var closedForNames = [numCloseReasons]string{"broken", "lifetime", "idle_time", "dead_idle", "close", "canceled", "shrunk"}

// String returns the reason's name: "broken", "lifetime", "idle_time", "dead_idle", "close",
// "canceled" or "shrunk", the reason label of gatedprom's and gatedotel's close counters.
func (r CloseReason) String() string {
	if int(r) < len(closedForNames) {
		return closedForNames[r]
	}
	return "unknown"
}

// CloseReasons yields every CloseReason, in the order of their values.
func CloseReasons() iter.Seq[CloseReason] {
	return func(yield func(CloseReason) bool) {
		for r := range CloseReason(numCloseReasons) {
			if !yield(r) {
				return
			}
		}
	}
}

// ClosedFor returns the connections closed for r: one of the Closed* counters.
func (s *PoolStats) ClosedFor(r CloseReason) int64 {
	if n := s.closedCounter(r); n != nil {
		return *n
	}
	return 0
}

// closedCounter returns the Closed* counter of s that counts r, nil for no reason: the one place
// a CloseReason is mapped to its field, for ClosedFor and for the pool's snapshot.
func (s *PoolStats) closedCounter(r CloseReason) *int64 {
	switch r {
	case CloseBroken:
		return &s.ClosedBroken
	case CloseLifetime:
		return &s.ClosedLifetime
	case CloseIdleTime:
		return &s.ClosedIdleTime
	case CloseDeadIdle:
		return &s.ClosedDeadIdle
	case CloseConnector:
		return &s.ClosedByClose
	case CloseCanceled:
		return &s.ClosedCanceled
	case CloseShrunk:
		return &s.ClosedShrunk
	}
	return nil
}

// callerEnded reports whether err, the failure of an attempt to get a connection ready for an
// operation under ctx (a dial, a reuse check, a statement that sent nothing), was the caller's
// doing: its context was canceled, or its deadline had passed when the attempt returned. The
// second covers drivers that set the socket's deadline to the context's (net.Dialer does, and
// so does gated's watch): their i/o timeout fires a moment before ctx.Err is set, and would
// otherwise count a caller's short deadline as a failure of a healthy server.
func callerEnded(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && err != nil && !time.Now().Before(deadline)
}

// deadReason is the close reason of a connection found unusable by an operation under ctx
// that failed with err before anything reached the server.
func deadReason(ctx context.Context, err error) CloseReason {
	if callerEnded(ctx, err) {
		return CloseCanceled
	}
	return CloseDeadIdle
}
