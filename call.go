package gated

import (
	"context"

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
//     nothing from one that may have reached the server.
//
// When the call ends it latches into the physical connection's session record (session.go) what
// the binding must know afterwards: the watch cut the socket short (the connection is broken),
// the context ended while the driver gave up the connection (the server may still run the
// statement: see session.mayRun), and the server's transaction status as the driver last heard
// it. Nothing else records per-call state: the driver seam answers questions (innerConn) and is
// told of a cancellation only through that record, when the connection is destroyed.
//
// A call is a value: begun with startCall and ended with end, both in the goroutine that makes
// the driver call (the open rows of a query end theirs at Close). It allocates nothing, except
// lib/pq's watch under a context that can end (context.AfterFunc).
type call struct {
	pc     *physConn
	ctx    context.Context
	before int64          // bytes pc had written when the call began; -1 when gated does not see the socket
	w      sockconn.Watch // the call's watch; none when the driver needs none or ctx never ends
}

// startCall begins a call under ctx on pc.
func (pc *physConn) startCall(ctx context.Context) call {
	pc.sess.tx = pc.inner.txStatus() // Raw may have run statements since the last call ended
	c := call{pc: pc, ctx: ctx, before: pc.inner.sent()}
	if s := pc.sock; s != nil && pc.watched {
		s.SetBusy(true)
		c.w = s.Watch(ctx, sockconn.CancelGrace)
	}
	return c
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
	if c.ctx.Err() != nil && !pc.inner.alive() {
		// The driver gave the connection up because the context ended: the server may still
		// run the statement, which destroying the connection must stop or await.
		pc.sess.mayRun = true
	}
	pc.sess.tx = pc.inner.txStatus()
}

// endLeftoverWatch ends a watch still armed when the binding ends: the rows of a query that were
// not closed first (database/sql closes them, so only after a panic). A watch must not outlive
// its binding; one that cut the socket short leaves the connection broken.
func (pc *physConn) endLeftoverWatch() {
	if pc.sock != nil && pc.sock.EndAnyWatch() {
		pc.broken = true
	}
}
