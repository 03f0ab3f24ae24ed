package gated

import (
	"context"
	"time"

	"github.com/gatedsql/gated/internal/sockconn"
)

// A call is one driver call in flight on a binding's physical connection: an exec, a query
// until its rows close, a begin, commit, rollback, prepare or ping, or a ROLLBACK gated sends
// after a failed end of a transaction. Everything that belongs to the call alone lives here and
// nowhere else, so nothing of it can outlive the call or be overwritten by the next one:
//
//   - the context that guards it, and its watch, when the driver needs one (lib/pq: see
//     sockconn.Watch), armed when the call begins and ended when it returns;
//   - how many bytes the connection had written when it began, to tell a call that sent
//     nothing from one that may have reached the server;
//   - for a call that is one of the application's statements (begun with startStatement), what
//     its statement event needs: it is emitted once, when the call ends (finish) or, for a
//     query, when its first result came (answered), the call going on until its rows close.
//
// When the call ends it latches into the physical connection's session record (physconn.go) what
// the binding must know afterwards: the watch cut the socket short (the connection is broken),
// the context ended while the driver gave up the connection (the server may still run the
// statement: see session.mayRun), and the server's transaction status as the driver last heard
// it. Nothing else records per-call state: the driver seam answers questions (drivers.Conn) and is
// told of a cancellation only through that record, when the connection is destroyed.
//
// A call is a value: begun with startCall (or startStatement) and ended with end (or finish),
// both in the goroutine that makes the driver call (the open rows of a query end theirs at
// Close). It allocates nothing, except lib/pq's watch under a context that can end
// (context.AfterFunc).
type call struct {
	pc     *physConn
	ctx    context.Context
	before int64          // bytes pc had written when the call began; -1 when gated does not see the socket
	w      sockconn.Watch // the call's watch; none when the driver needs none or ctx never ends
	stmt   statement      // the statement event still to emit; none once emitted, or for gated's own calls
}

// A statement is what the statement event of a call needs: where it goes, the gate it counts
// in, the context it carries (nil for Commit and Rollback, which database/sql gives none) and
// when the call began (monoNow; 0 when no Observer was attached then). obs is nil when there is
// nothing to emit.
type statement struct {
	obs   *observer
	g     *gate
	ctx   context.Context
	start time.Duration
}

// startCall begins a call under ctx on pc.
func (pc *physConn) startCall(ctx context.Context) call {
	pc.sess.tx = pc.inner.TxStatus() // Raw may have run statements since the last call ended
	c := call{pc: pc, ctx: ctx, before: pc.inner.Sent()}
	if s := pc.sock; s != nil && pc.watched {
		s.SetBusy(true)
		c.w = s.Watch(ctx, sockconn.CancelGrace)
	}
	return c
}

// startStatement begins a call of the application's under ctx on the binding's physical
// connection, one that emits the statement event when it ends: the call into the inner driver is
// timed from here. A nil ctx is a call under no context (Commit, Rollback): its event carries
// none. When the binding has lost its physical connection, the call has none either and only
// its event is left to emit.
func (b *binding) startStatement(ctx context.Context, obs *observer) call {
	var c call
	if b.pc != nil {
		cctx := ctx
		if cctx == nil {
			cctx = context.Background()
		}
		c = b.pc.startCall(cctx)
	}
	c.stmt = statement{obs: obs, g: b.g, ctx: ctx, start: obs.now()}
	return c
}

// answered emits the call's statement event for its driver call that returned err, if not yet
// emitted: at the end of the call, or for a query at its first result, the rows keeping the call
// open until they close.
func (c *call) answered(err error) {
	if o := c.stmt.obs; o != nil {
		c.stmt.obs = nil
		o.statement(c.stmt.g, c.stmt.start, c.stmt.ctx, err)
	}
}

// finish ends a call whose driver call returned err: its statement event, then end.
func (c *call) finish(err error) {
	c.answered(err)
	c.end()
}

// end ends the call and latches what happened into its physical connection's session record. It
// does nothing on a call that has ended.
func (c *call) end() {
	pc := c.pc
	if pc == nil {
		return
	}
	c.pc = nil
	if c.w.End() {
		pc.broken = true // its socket's deadline has passed
	}
	if c.ctx.Err() != nil && !pc.inner.Alive() {
		// The driver gave the connection up because the context ended: the server may still
		// run the statement, which destroying the connection must stop or await.
		pc.sess.mayRun = true
	}
	pc.sess.tx = pc.inner.TxStatus()
}

// endLeftoverWatch ends a watch still armed when the binding ends: the rows of a query that were
// not closed first (database/sql closes them, so only after a panic). A watch must not outlive
// its binding; one that cut the socket short leaves the connection broken. Only a call on a
// connection whose driver needs a watch (pc.watched) arms one that can outlive the call (the
// driver seam's own watches end before its methods return), so for any other the socket's lock
// is not taken.
func (pc *physConn) endLeftoverWatch() {
	if pc.watched && pc.sock != nil && pc.sock.EndAnyWatch() {
		pc.broken = true
	}
}
