package gated

// The emitting side of the events of event.go: the only code that builds an Event. Every other
// file reports what happened through one method of its event family, and nothing else:
//
//   - admission, from the binding (binding.go): acquired (EventAdmitted, EventRejectedFull,
//     EventRejectedTimeout, EventRejectedDisplaced, EventCanceled), connected (EventConnect),
//     held (EventHold);
//   - statements, from the end of a call (call.go): statement (EventStatement, and
//     EventStatementTimeout and EventLockTimeout, which it counts in the workload's Stats), and
//     commitUnknown (EventCommitUnknown, counted and always logged);
//   - physical connections, from the pool (pool.go): dialed (EventConnOpened,
//     EventConnectFailed, EventConnectCanceled), checkCanceled (EventConnectCanceled) and
//     connClosed (EventConnClosed).
//
// Each method checks first, inline, whether anything needs it (an Observer attached, a Logger,
// a counter to keep), so that with nothing attached an operation pays one atomic load per
// family method and reads no clock.

import (
	"context"
	"log/slog"
	"time"

	"github.com/gatedsql/gated/internal/drivers"
)

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

// Admission.

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
	case g.wl.displaced:
		kind = EventRejectedDisplaced
		if o.log != nil {
			g.wl.refusals.add(2, nil)
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

// Statements.

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
	switch drivers.SQLState(err) {
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

// Physical connections.

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
