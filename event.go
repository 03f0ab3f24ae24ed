package gated

// The vocabulary of gated's measurements: what an Event is, its kinds and which fields each
// sets. emit.go is the only code that builds one.

import (
	"context"
	"time"
)

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
