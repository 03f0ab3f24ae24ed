package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/gatedsql/gated/internal/drivers"
)

// maxPhysicalTries bounds how many physical connections one operation tries when each reports
// driver.ErrBadConn before anything reached the server.
const maxPhysicalTries = 3

// A conn is the virtual connection database/sql pools. It costs a small struct and no I/O until
// its first operation binds it (binding.go): execution permit, physical connection. The binding
// lasts until database/sql returns the connection to its pool (IsValid) or closes it.
// database/sql serializes calls on one driver connection, so conn needs no lock of its own.
type conn struct {
	c *Connector
	binding
	closed bool

	// The call of a query that succeeded, handed by runAs to the rows that end it (rowsOf).
	handed call
	rows   rows // the rows of the binding's query, when no earlier rows of it are open
}

var (
	_ driver.Conn               = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
)

// bind makes sure the connection holds its permits and a physical connection.
func (cn *conn) bind(ctx context.Context) error {
	if cn.g != nil {
		if cn.pc == nil {
			return errNoPhysical
		}
		return nil
	}
	if cn.closed {
		return driver.ErrBadConn // database/sql never uses a closed conn; be safe if it did
	}
	return cn.binding.bind(ctx, cn.c)
}

// errNoPhysical is returned for calls made after the binding lost its physical connection and
// could not get another; the permit is released when database/sql returns the connection.
var errNoPhysical = errors.New("gated: the operation's physical connection failed and no replacement could be opened")

// unbind ends the binding, if any (binding.unbind).
func (cn *conn) unbind() { cn.binding.unbind(cn.c) }

// An opKind says what an operation leaves behind, for run.
type opKind uint8

const (
	opSession opKind = iota // may create session state (exec; begin)
	opFresh                 // creates no session state a replacement would lose (prepare, ping)
	opRows                  // a query: on success its call goes on until the rows close
)

// run is runAs for an operation that creates session state (exec, begin) or, with keepsFresh,
// none (prepare, ping).
func (cn *conn) run(ctx context.Context, keepsFresh bool, op func(*physConn) error) error {
	if keepsFresh {
		return cn.runAs(ctx, opFresh, op)
	}
	return cn.runAs(ctx, opSession, op)
}

// runAs calls op on the bound physical connection, as one call (call.go) under ctx: begun before
// op and ended when op returns, also when it panics, except that the call of a query that
// succeeded (opRows) is handed to its rows (cn.handed), which end it at Close. The call emits
// the statement event when op returns (not when it panics).
//
// When op fails and gated knows that nothing was sent (see drivers.Conn.Unsent: for pgx and lib/pq
// no byte left the socket, for other drivers driver.ErrBadConn) on a binding without session
// state yet, the dead connection is replaced and op run again while the permits stay held:
// returning driver.ErrBadConn would make database/sql retry through the gate while this permit
// is still held by the connection being destroyed. Anything that may have reached the server is
// never run again, and its error never wraps driver.ErrBadConn, so database/sql does not retry
// it either. Dead idle connections are finite, so replays end; connections opened for this
// operation that fail too end them after maxPhysicalTries.
//
// A panic in op (an argument's Value method, say) ends a binding this call made, destroying the
// physical connection whose state is unknown, before it goes on: database/sql does not return
// a connection whose call panicked, and the permit would be lost.
func (cn *conn) runAs(ctx context.Context, kind opKind, op func(*physConn) error) error {
	made := cn.g == nil
	if err := cn.bind(ctx); err != nil {
		return err
	}
	var cl call
	defer func() {
		if r := recover(); r != nil {
			cl.end()
			cn.abandon(made)
			panic(r)
		}
	}()
	for newTries := 0; ; {
		pc := cn.pc
		pc.sweep(cn.c.stmts)
		cl = cn.startStatement(ctx, cn.c.obs)
		before := cl.before
		wasFresh := cn.fresh
		err := op(pc)
		if err == nil && kind == opRows {
			cl.answered(nil)
			cn.handed, cl = cl, call{}
		} else {
			cl.finish(err)
		}
		if err != nil {
			cn.binding.note(ctx, err)
		}
		if err == nil {
			if kind != opFresh {
				cn.fresh = false
			}
			return nil
		}
		if !pc.inner.Unsent(err, before) {
			if kind != opFresh {
				cn.fresh = false
			}
			return opError(ctx, err, wasFresh)
		}
		pc.broken = true
		if !cn.fresh {
			// Session state (a transaction, a pinned connection's settings) died with pc:
			// the caller must see the failure.
			return opError(ctx, err, false)
		}
		if !pc.used {
			if newTries++; newTries == maxPhysicalTries {
				return fmt.Errorf("gated: %d new physical connections failed before the statement was sent: %w", newTries, hideBadConn(err))
			}
		}
		if err := cn.binding.replace(ctx, cn.c.pool, err); err != nil {
			return err
		}
	}
}

// opError is the error run returns for err. On a binding that was fresh when the operation began,
// it never wraps driver.ErrBadConn: database/sql would run the operation again, on another
// connection, and it may have reached the server. Inside a transaction or on a pinned *sql.Conn
// database/sql retries nothing, and the driver's driver.ErrBadConn is returned as it is, as with
// the plain driver. When the context has ended, which a driver may report only as a bad
// connection (lib/pq does), the error wraps the context's error too.
func opError(ctx context.Context, err error, mayBeRetried bool) error {
	if mayBeRetried {
		err = hideBadConn(err)
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", err, cerr)
	}
	return err
}

// abandon is run's panic path: the physical connection is destroyed, and a binding made by the
// panicking call ends (a transaction's or pinned connection's binding ends with its Rollback or
// Close, which the caller's deferred calls usually run).
func (cn *conn) abandon(made bool) {
	if cn.pc != nil {
		cn.pc.broken = true
	}
	if made {
		cn.unbind()
	}
}

// PrepareContext binds the connection and prepares query on the physical connection, so that
// errors in the query surface here as with any driver. The returned statement is virtual: it
// binds again for every use after this binding ends. When the inner DSN asks for no named
// statements (physConn.serverPrepares), nothing is prepared and errors surface at first use.
func (cn *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	share := cn.c.stmts.acquire(query)
	numInput := -1
	err := cn.run(ctx, true, func(pc *physConn) error {
		if !pc.inner.ServerPrepares(query) {
			return nil
		}
		st, err := pc.stmtFor(ctx, share)
		if err == nil {
			numInput = st.NumInput()
		}
		return err
	})
	if err != nil {
		cn.c.stmts.release(share)
		return nil, err
	}
	return &stmt{cn: cn, share: share, numInput: numInput}, nil
}

// Prepare is PrepareContext without a context.
func (cn *conn) Prepare(query string) (driver.Stmt, error) {
	return cn.PrepareContext(context.Background(), query)
}

// BeginTx binds the connection and begins a transaction on the physical connection.
func (cn *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var inner driver.Tx
	err := cn.run(ctx, false, func(pc *physConn) (err error) {
		var set string
		if cn.c.timeouts.deadline && pc.sess.idle() {
			// Not inside a transaction the application began with BEGIN: gated sends nothing
			// of its own there.
			set = cn.c.timeouts.txSet(ctx, pc)
		}
		inner, err = pc.begin(ctx, opts, set)
		return err
	})
	if err != nil {
		return nil, err
	}
	cn.txOpen = true
	return &tx{cn: cn, inner: inner}, nil
}

// Begin is BeginTx with default options.
func (cn *conn) Begin() (driver.Tx, error) {
	return cn.BeginTx(context.Background(), driver.TxOptions{})
}

// ExecContext binds the connection and executes query on the physical connection.
func (cn *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	var res driver.Result
	err := cn.run(ctx, false, func(pc *physConn) (err error) {
		if err := cn.limitSession(ctx, pc); err != nil {
			return err
		}
		defer cn.c.timeouts.noteSessionChange(pc, query)
		for retried := false; ; retried = true {
			res, err = pc.exec(ctx, query, args)
			if !cn.mayRetryStale(pc, query, err, retried) {
				return err
			}
		}
	})
	return res, err
}

// QueryContext binds the connection and runs query on the physical connection. The driver's rows
// are returned as they are: database/sql keeps the connection, and so the binding, until
// rows.Close.
func (cn *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	var rs driver.Rows
	err := cn.runAs(ctx, opRows, func(pc *physConn) (err error) {
		if err := cn.limitSession(ctx, pc); err != nil {
			return err
		}
		defer cn.c.timeouts.noteSessionChange(pc, query)
		for retried := false; ; retried = true {
			rs, err = pc.query(ctx, query, args)
			if !cn.mayRetryStale(pc, query, err, retried) {
				return err
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return cn.rowsOf(rs), nil
}

// mayRetryStale reports whether an unprepared query that failed with err may run once more: the
// server refused, before running anything (drivers.Conn.RefusedStale), a statement that the
// application prepared for the same text (pgx runs an unprepared query on that one, so the copy is
// evicted either way) or that the driver prepared and cached for it (drivers.Conn.StaleStatement)
// when the text is one statement (drivers.OneStatement: a string of several may have committed
// some); and nothing else ran in the binding, so no transaction was aborted by the failure. Any
// other failure, whatever its SQLSTATE, is returned as it is.
func (cn *conn) mayRetryStale(pc *physConn, query string, err error, retried bool) bool {
	if err == nil || !pc.inner.RefusedStale(err) {
		return false
	}
	if !pc.evictQuery(query) && !(drivers.OneStatement(query) && pc.inner.StaleStatement(err)) {
		return false
	}
	return !retried && cn.fresh
}

// Ping binds the connection like any other operation, so under overload it is refused: a
// readiness probe then reports the overload.
func (cn *conn) Ping(ctx context.Context) error {
	return cn.run(ctx, true, func(pc *physConn) error { return pc.ping(ctx) })
}

// CheckNamedValue accepts every argument; the physical connection's rules are applied after
// binding (see convertArgs).
func (cn *conn) CheckNamedValue(*driver.NamedValue) error { return nil }

// ResetSession is called by database/sql before it reuses the connection. The connection was
// already unbound when it was returned, so there is nothing to reset.
func (cn *conn) ResetSession(context.Context) error {
	cn.unbind()
	return nil
}

// IsValid is called by database/sql whenever it takes the connection back: the end of every
// operation, transaction or pinned *sql.Conn. It ends the binding.
func (cn *conn) IsValid() bool {
	cn.unbind()
	return !cn.c.isClosed()
}

// Close ends the binding, if any.
func (cn *conn) Close() error {
	cn.unbind()
	cn.closed = true
	return nil
}

// Unwrap returns the inner driver's connection behind driverConn, the value that
// (*sql.Conn).Raw passes to its function, binding it first if needed: it may wait for an
// execution permit under ctx and fail like any operation. The binding, and so the permit, lasts
// until the *sql.Conn is closed. Use the result only inside Raw's function, and never leave it in
// a transaction: gated then has to discard the connection.
//
//	err := sqlConn.Raw(func(dc any) error {
//		inner, err := gated.Unwrap(ctx, dc)
//		if err != nil {
//			return err
//		}
//		pgxConn := inner.(*stdlib.Conn).Conn()
//		...
//	})
func Unwrap(ctx context.Context, driverConn any) (driver.Conn, error) {
	cn, ok := driverConn.(*conn)
	if !ok {
		return nil, fmt.Errorf("gated: Unwrap: %T is not a gated connection", driverConn)
	}
	if err := cn.bind(ctx); err != nil {
		return nil, err
	}
	cn.fresh = false       // the caller may create session state behind the wrapper's back
	cn.pc.sess.stmtMs = -1 // and change its statement_timeout
	return cn.pc.conn, nil
}

// limitSession gives a statement outside a transaction its server-side limit (timeout.go). It
// sends nothing unless the server reported the session idle: inside a transaction begun with
// BeginTx the limit was set with SET LOCAL when it began, and inside one the application began
// itself (BEGIN on a pinned *sql.Conn) gated sends nothing of its own: a ROLLBACK would undo it
// behind gated's back, and in a failed transaction the server refuses it.
func (cn *conn) limitSession(ctx context.Context, pc *physConn) error {
	if !cn.c.timeouts.deadline || !pc.sess.idle() {
		return nil
	}
	return cn.c.timeouts.applySession(ctx, pc)
}
