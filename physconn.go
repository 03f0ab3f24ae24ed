package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/gatedsql/gated/internal/drivers"
	"github.com/gatedsql/gated/internal/sockconn"
)

// A physConn is one connection of the inner driver. It is used by one goroutine at a time: the
// operation bound to it, or the pool while idle or being destroyed.
//
// Its driver calls mirror what database/sql does for a driver.Conn (optional interfaces first,
// the same fallbacks and errors otherwise), because database/sql now only sees the virtual
// connection above it. What gated knows about the particular driver is behind inner.
type physConn struct {
	conn      driver.Conn
	inner     drivers.Conn
	createdAt int64         // pool clock (Unix ns) when opened, plus its lifetime jitter (pool.dial)
	idleSince int64         // pool clock when last made idle
	used      bool          // served an operation: reset before the next one
	restedAt  time.Duration // monoNow when it last went back idle after serving an operation (rested)
	broken    bool          // must be destroyed rather than reused
	closedFor CloseReason   // why it is destroyed; CloseBroken unless set (event.go)

	sock       *sockconn.Conn // the socket gated dialed (pgx, lib/pq); nil otherwise
	watched    bool           // the driver cannot interrupt its socket's calls: each call watches its context (lib/pq)
	checkEvery bool           // checked before every reuse, however short its rest (drivers.Conn.CheckEveryReuse: lib/pq)

	sess session // what gated knows of the session on the server (session, below)

	stmts   []physStmt // statements the application prepared, oldest first (see stmtcache.go)
	sweptAt uint64     // stmtRegistry.dead when the cache was last swept
}

// newPhysConn makes the physical connection of dc, which the driver seam's connector may have
// returned wrapped (drivers.Unwrap).
func newPhysConn(dc driver.Conn, sock *sockconn.Conn, wrap drivers.Wrap) *physConn {
	inner := wrap(dc, sock)
	return &physConn{conn: drivers.Unwrap(dc), inner: inner, sock: sock, watched: inner.WatchesSocket(), checkEvery: inner.CheckEveryReuse(), sess: session{tx: inner.TxStatus()}}
}

func (pc *physConn) expired(now int64, lifetime, idleTime time.Duration) bool {
	return (lifetime > 0 && time.Duration(now-pc.createdAt) >= lifetime) ||
		(idleTime > 0 && time.Duration(now-pc.idleSince) >= idleTime)
}

// reusable reports whether pc may serve another operation: open, idle on the server (as far as
// the driver can tell: see drivers.Conn.Idle), and no statement may still run on it.
func (pc *physConn) reusable() bool { return !pc.broken && !pc.sess.mayRun && pc.inner.Idle() }

// rested is called when pc goes back idle at now (monoNow) after a binding that left it reusable:
// nothing runs on the server any more.
func (pc *physConn) rested(now time.Duration) {
	pc.restedAt = now
	if pc.sock != nil {
		pc.sock.SetBusy(false)
	}
}

// answerAge returns how long ago the server's last data arrived on the connection's socket, or 0
// when gated cannot tell: a driver whose socket gated does not dial (MySQL, any other driver),
// a unix-domain socket, a platform without TCP_INFO. See sockconn.Conn.SinceLastRecv.
func (pc *physConn) answerAge() time.Duration {
	if pc.sock == nil {
		return 0
	}
	return pc.sock.SinceLastRecv()
}

// alive reports whether the driver still considers the connection open; true when the driver
// cannot tell.
func (pc *physConn) alive() bool { return pc.inner.Alive() }

// checkAfterRest is how long a used connection must have rested idle for its next operation to
// check its socket before the first write (drivers.Conn.CheckBeforeWrite: one system call, 2–4 µs
// here, the largest part of what gated adds to a SELECT 1 when operations follow one another at
// once). A server hangs up on an idle connection when something outside it acts
// (pg_terminate_backend, a restart, idle_session_timeout, a proxy's idle timeout); a connection
// reused within this time of its last operation seldom meets that, and when it does, its
// statement fails as with the plain pgx (run again only when nothing of it was sent), whose
// ResetSession checks a connection at most once a second. lib/pq's connections are checked
// before every reuse (drivers.Conn.CheckEveryReuse).
const checkAfterRest = time.Millisecond

// reset prepares a used connection for a new operation: when it rested at least checkAfter (the
// pool's checkAfterRest), or its driver wants it every time (lib/pq), its socket is checked
// before the next write (a server that hung up while it was idle is found before anything is
// sent), then the driver's ResetSession runs.
func (pc *physConn) reset(ctx context.Context, checkAfter time.Duration) error {
	if !pc.used {
		return nil
	}
	if pc.checkEvery || monoNow()-pc.restedAt >= checkAfter {
		pc.inner.CheckBeforeWrite()
	}
	if r, ok := pc.conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

// close closes the connection and waits, bounded, until the driver's cleanup has finished.
func (pc *physConn) close() {
	if pc.inner.CloseStmts() {
		for _, ps := range pc.stmts {
			ps.st.Close()
		}
	}
	pc.stmts = nil
	pc.inner.Close(pc.sess.mayRun)
}

func (pc *physConn) exec(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	switch c := pc.conn.(type) {
	case driver.ExecerContext:
		return runDirect(ctx, pc, query, args, c.ExecContext, nil, pc.execOnce)
	case driver.Execer: //nolint:staticcheck // legacy drivers, as database/sql supports them
		return runDirect(ctx, pc, query, args, nil, c.Exec, pc.execOnce)
	}
	return runDirect(ctx, pc, query, args, nil, nil, pc.execOnce)
}

func (pc *physConn) query(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	switch c := pc.conn.(type) {
	case driver.QueryerContext:
		return runDirect(ctx, pc, query, args, c.QueryContext, nil, pc.queryOnce)
	case driver.Queryer: //nolint:staticcheck // legacy drivers, as database/sql supports them
		return runDirect(ctx, pc, query, args, nil, c.Query, pc.queryOnce)
	}
	return runDirect(ctx, pc, query, args, nil, nil, pc.queryOnce)
}

// runDirect runs an unprepared query as database/sql would on a driver.Conn: directly, with the
// connection's context-aware method (direct) or legacy one (legacy), whichever the driver has;
// and through a statement prepared for this one use (once) when it has neither or answers
// driver.ErrSkip. It never uses a statement the application prepared: that statement may be
// stale (a migration changed its result type) where a fresh query is not, or, behind a
// transaction-pooling PgBouncer, exist on another server connection only.
func runDirect[R any](ctx context.Context, pc *physConn, query string, args []driver.NamedValue,
	direct func(context.Context, string, []driver.NamedValue) (R, error),
	legacy func(string, []driver.Value) (R, error),
	once func(context.Context, string, []driver.NamedValue) (R, error),
) (R, error) {
	var zero R
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
	return once(ctx, query, args)
}

// execOnce prepares query, executes it and closes the statement, as database/sql does for a
// driver without Execer.
func (pc *physConn) execOnce(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	st, err := pc.prepareDriver(ctx, query)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return pc.execStmt(ctx, st, args)
}

// queryOnce prepares query and runs it; the statement is closed with the rows.
func (pc *physConn) queryOnce(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	st, err := pc.prepareDriver(ctx, query)
	if err != nil {
		return nil, err
	}
	dr, err := pc.queryStmt(ctx, st, args)
	if err != nil {
		st.Close()
		return nil, err
	}
	return &rows{Rows: dr, st: st}, nil
}

// prepareDriver prepares query on the driver connection, as database/sql's ctxDriverPrepare.
func (pc *physConn) prepareDriver(ctx context.Context, query string) (driver.Stmt, error) {
	if c, ok := pc.conn.(driver.ConnPrepareContext); ok {
		return c.PrepareContext(ctx, query)
	}
	st, err := pc.conn.Prepare(query)
	if err == nil && ctx.Err() != nil {
		st.Close()
		return nil, ctx.Err()
	}
	return st, err
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

// begin begins a transaction. set, when not empty, is SET LOCAL statements that begin it too.
func (pc *physConn) begin(ctx context.Context, opts driver.TxOptions, set string) (driver.Tx, error) {
	if set != "" {
		return pc.inner.BeginSet(ctx, opts, set)
	}
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

// A session is what gated knows of a physical connection's session on the server: one record
// per physical connection, written when a call ends (call.end) from what the server reported, and
// by gated's own SET of statement_timeout (timeout.go). The transaction status is read again when
// a call begins, since the application may have run statements through Unwrap in between.
// Nothing of one call is kept in it beyond what the next calls and the binding's end must know.
type session struct {
	// tx is the transaction status the server last reported, as the driver heard it: 'I' idle,
	// 'T' in a transaction, 'E' in a failed transaction; '?' when the driver does not report
	// it (drivers.Conn.TxStatus).
	tx byte
	// stmtMs is the statement_timeout gated set on the session: 0 the startup value, -1 unknown.
	stmtMs int64
	// mayRun is latched by a call that ended with its context ended and its connection given up
	// by the driver: the server may still run its statement, which the connection's destroy must
	// stop or await (drivers.Conn.Close).
	mayRun bool
}

// idle reports whether the server reported the session outside any transaction: only then does
// gated send statements of its own on it.
func (s *session) idle() bool { return s.tx == 'I' }
