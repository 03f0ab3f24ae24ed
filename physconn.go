package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// maxCachedStmts bounds the prepared statements kept per physical connection; beyond it the
// oldest-inserted is closed, so an application that prepares ever new queries does not
// accumulate statements on the server.
const maxCachedStmts = 64

// A physConn is one connection of the inner driver. It is used by one goroutine at a time: the
// operation bound to it, or the pool while idle or being destroyed.
//
// Its driver calls mirror what database/sql does for a driver.Conn (optional interfaces first,
// the same fallbacks and errors otherwise), because database/sql now only sees the virtual
// connection above it.
type physConn struct {
	conn      driver.Conn
	pg        *pgconn.PgConn // set for pgx: exact health, and the end of its asynchronous cleanup
	sock      *sockCheck     // the socket, when known (pgx, lib/pq): checked before reuse
	createdAt int64          // pool clock (Unix ns) when opened
	idleSince int64          // pool clock when last made idle
	used      bool           // served an operation: reset before the next one
	broken    bool           // must be destroyed rather than reused
	closedFor CloseReason    // why it is destroyed; CloseBroken unless set (observe.go)

	stmts     map[string]driver.Stmt // prepared statements by query text
	stmtOrder []string               // insertion order, for eviction
}

func newPhysConn(dc driver.Conn, nc net.Conn) *physConn {
	pc := &physConn{conn: dc}
	if sc, ok := dc.(*stdlib.Conn); ok {
		pc.pg = sc.Conn().PgConn()
		nc = pc.pg.Conn()
	}
	if nc != nil {
		pc.sock = newSockCheck(nc)
	}
	return pc
}

func (pc *physConn) expired(now int64, lifetime, idleTime time.Duration) bool {
	return (lifetime > 0 && time.Duration(now-pc.createdAt) >= lifetime) ||
		(idleTime > 0 && time.Duration(now-pc.idleSince) >= idleTime)
}

// reusable reports whether pc may serve another operation: open, not in a transaction, not busy.
func (pc *physConn) reusable() bool {
	if pc.broken || !pc.alive() {
		return false
	}
	return pc.pg == nil || (!pc.pg.IsBusy() && pc.pg.TxStatus() == 'I')
}

// alive reports whether the driver still considers the connection open; true when the driver
// cannot tell.
func (pc *physConn) alive() bool {
	if pc.pg != nil {
		return !pc.pg.IsClosed()
	}
	if v, ok := pc.conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// reset prepares a used connection for a new operation: the socket must be quiet (peerGone),
// then the driver's ResetSession runs.
func (pc *physConn) reset(ctx context.Context) error {
	if !pc.used {
		return nil
	}
	if pc.sock.peerGone() {
		return driver.ErrBadConn
	}
	if r, ok := pc.conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

// close closes the connection and waits, bounded, until the driver's cleanup has finished.
func (pc *physConn) close() {
	if pc.pg == nil {
		// pgx statements die with their connection; closing them first would cost a round trip
		// each. Other drivers may hold client-side resources per statement.
		for _, st := range pc.stmts {
			st.Close()
		}
	}
	pc.stmts, pc.stmtOrder = nil, nil
	pc.conn.Close()
	if pc.pg != nil {
		t := time.NewTimer(cleanupWait)
		select {
		case <-pc.pg.CleanupDone():
		case <-t.C:
		}
		t.Stop()
	}
}

func (pc *physConn) exec(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	switch c := pc.conn.(type) {
	case driver.ExecerContext:
		return runDirect(ctx, pc, query, args, c.ExecContext, nil, pc.execStmt)
	case driver.Execer: //nolint:staticcheck // legacy drivers, as database/sql supports them
		return runDirect(ctx, pc, query, args, nil, c.Exec, pc.execStmt)
	}
	return runDirect(ctx, pc, query, args, nil, nil, pc.execStmt)
}

func (pc *physConn) query(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	switch c := pc.conn.(type) {
	case driver.QueryerContext:
		return runDirect(ctx, pc, query, args, c.QueryContext, nil, pc.queryStmt)
	case driver.Queryer: //nolint:staticcheck // legacy drivers, as database/sql supports them
		return runDirect(ctx, pc, query, args, nil, c.Query, pc.queryStmt)
	}
	return runDirect(ctx, pc, query, args, nil, nil, pc.queryStmt)
}

// runDirect runs query as database/sql would on a driver.Conn: on a statement this connection
// already prepared for it; otherwise directly, with the connection's context-aware method
// (direct) or legacy one (legacy), whichever the driver has; and through a newly prepared
// statement when it has neither or answers driver.ErrSkip.
func runDirect[R any](ctx context.Context, pc *physConn, query string, args []driver.NamedValue,
	direct func(context.Context, string, []driver.NamedValue) (R, error),
	legacy func(string, []driver.Value) (R, error),
	onStmt func(context.Context, driver.Stmt, []driver.NamedValue) (R, error),
) (R, error) {
	var zero R
	if st := pc.stmts[query]; st != nil {
		return onStmt(ctx, st, args)
	}
	if direct != nil || legacy != nil {
		a, err := convertArgs(pc.conn, nil, args)
		if err != nil {
			return zero, err
		}
		var r R
		if direct != nil {
			r, err = direct(ctx, query, a)
		} else {
			vals, verr := namedValueToValue(a)
			if verr != nil {
				return zero, verr
			}
			if err := ctx.Err(); err != nil {
				return zero, err
			}
			r, err = legacy(query, vals)
		}
		if err != driver.ErrSkip {
			return r, err
		}
	}
	st, err := pc.prepare(ctx, query)
	if err != nil {
		return zero, err
	}
	return onStmt(ctx, st, args)
}

// prepare returns the connection's statement for query, preparing it on first use.
func (pc *physConn) prepare(ctx context.Context, query string) (driver.Stmt, error) {
	if st := pc.stmts[query]; st != nil {
		return st, nil
	}
	var st driver.Stmt
	var err error
	if c, ok := pc.conn.(driver.ConnPrepareContext); ok {
		st, err = c.PrepareContext(ctx, query)
	} else {
		st, err = pc.conn.Prepare(query)
		if err == nil && ctx.Err() != nil {
			st.Close()
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	if pc.stmts == nil {
		pc.stmts = make(map[string]driver.Stmt)
	}
	if len(pc.stmtOrder) >= maxCachedStmts {
		oldest := pc.stmtOrder[0]
		pc.stmtOrder = append(pc.stmtOrder[:0], pc.stmtOrder[1:]...)
		pc.stmts[oldest].Close()
		delete(pc.stmts, oldest)
	}
	pc.stmts[query] = st
	pc.stmtOrder = append(pc.stmtOrder, query)
	return st, nil
}

func (pc *physConn) execStmt(ctx context.Context, st driver.Stmt, args []driver.NamedValue) (driver.Result, error) {
	a, err := stmtArgs(pc.conn, st, args)
	if err != nil {
		return nil, err
	}
	if s, ok := st.(driver.StmtExecContext); ok {
		return s.ExecContext(ctx, a)
	}
	vals, err := namedValueToValue(a)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return st.Exec(vals) //nolint:staticcheck // fallback for drivers without StmtExecContext
}

func (pc *physConn) queryStmt(ctx context.Context, st driver.Stmt, args []driver.NamedValue) (driver.Rows, error) {
	a, err := stmtArgs(pc.conn, st, args)
	if err != nil {
		return nil, err
	}
	if s, ok := st.(driver.StmtQueryContext); ok {
		return s.QueryContext(ctx, a)
	}
	vals, err := namedValueToValue(a)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return st.Query(vals) //nolint:staticcheck // fallback for drivers without StmtQueryContext
}

// stmtArgs converts args for st and checks their number as database/sql would.
func stmtArgs(ci driver.Conn, st driver.Stmt, args []driver.NamedValue) ([]driver.NamedValue, error) {
	a, err := convertArgs(ci, st, args)
	if err != nil {
		return nil, err
	}
	if want := st.NumInput(); want >= 0 && len(a) != want {
		return nil, fmt.Errorf("sql: expected %d arguments, got %d", want, len(a))
	}
	return a, nil
}

func (pc *physConn) begin(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c, ok := pc.conn.(driver.ConnBeginTx); ok {
		return c.BeginTx(ctx, opts)
	}
	if opts.Isolation != 0 {
		return nil, errors.New("sql: driver does not support non-default isolation level")
	}
	if opts.ReadOnly {
		return nil, errors.New("sql: driver does not support read-only transactions")
	}
	txi, err := pc.conn.Begin() //nolint:staticcheck // fallback for drivers without ConnBeginTx
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		txi.Rollback()
		return nil, err
	}
	return txi, nil
}

func (pc *physConn) ping(ctx context.Context) error {
	if p, ok := pc.conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// endTxTimeout bounds the ROLLBACK that endTx sends.
const endTxTimeout = 5 * time.Second

// endTx is called after a COMMIT or ROLLBACK failed on a driver that does not report its
// transaction status (everything but pgx). It ends whatever transaction may still be open and
// reports whether the connection is now known to be outside one: the driver still reports it
// valid (driver.Validator) and answers ROLLBACK without error, which PostgreSQL does outside a
// transaction too (with a warning). The round trip, on this rare path, lets the connection be
// reused and so its permit come back before Commit returns; a destroyed connection would give it
// back only later, in the background, and a caller retrying at once would find it taken.
func (pc *physConn) endTx() bool {
	if v, ok := pc.conn.(driver.Validator); !ok || !v.IsValid() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), endTxTimeout)
	defer cancel()
	_, err := pc.exec(ctx, "ROLLBACK", nil)
	return err == nil
}
