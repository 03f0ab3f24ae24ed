package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"
)

// maxPhysicalTries bounds how many physical connections one operation tries when each reports
// driver.ErrBadConn before anything reached the server.
const maxPhysicalTries = 3

// A conn is the virtual connection database/sql pools. It costs a small struct and no I/O until
// its first operation binds it: admission permit, execution permit, physical connection. The
// binding lasts until database/sql returns the connection to its pool (IsValid) or closes it.
// database/sql serializes calls on one driver connection, so conn needs no lock of its own.
type conn struct {
	c *Connector

	// The current binding; g is nil when unbound. pc may be nil while g is set, after a failed
	// replacement of a broken physical connection: the permit is still held until unbind.
	g      *gate
	pc     *physConn
	fresh  bool // nothing that created session state ran on pc in this binding: a broken pc may be swapped
	txOpen bool // a transaction began on pc and has not ended
	closed bool

	since time.Duration // when the permit was granted (monoNow), if an Observer is attached
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
	g := cn.c.gate
	start := cn.c.obs.now()
	pc, err := g.acquire(ctx)
	cn.since = cn.c.obs.acquired(g, start, err)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		// Admitted at once although the caller has given up: a reset under this context would
		// fail and condemn a healthy connection.
		g.release(pc)
		return err
	}
	pc, err = cn.c.pool.ready(ctx, pc)
	cn.c.obs.connected(g, cn.since, err)
	if err != nil {
		g.release(nil)
		return err
	}
	cn.g, cn.pc, cn.fresh = g, pc, true
	return nil
}

// errNoPhysical is returned for calls made after the binding lost its physical connection and
// could not get another; the permit is released when database/sql returns the connection.
var errNoPhysical = errors.New("gated: the operation's physical connection failed and no replacement could be opened")

// unbind ends the binding: a healthy physical connection goes to the next waiter or idle, a
// broken one is destroyed in the background and its permit released after that. Never blocks.
func (cn *conn) unbind() {
	g, pc := cn.g, cn.pc
	if g == nil {
		return
	}
	cn.g, cn.pc = nil, nil
	cn.c.obs.held(g, cn.since)
	if cn.txOpen {
		// The transaction was neither committed nor rolled back.
		cn.txOpen = false
		if pc != nil {
			pc.broken = true
		}
	}
	switch {
	case pc == nil:
		g.release(nil)
	case pc.reusable():
		pc.used = true
		g.release(pc)
	default:
		cn.c.pool.destroyAsync(pc, func() { g.release(nil) })
	}
}

// run calls op on the bound physical connection. When op fails because the physical connection
// was already dead (see lostBeforeRun) on a binding that has no session state yet, the dead
// connection is replaced and op retried while the permits stay held: returning driver.ErrBadConn
// would make database/sql retry through the gate while this permit is still held by the
// connection being destroyed. Dead idle connections are finite, so retries end; a connection
// opened for this operation that fails too ends them after maxPhysicalTries. keepsFresh is true
// for operations that create no session state a replacement would lose (prepare, ping).
func (cn *conn) run(ctx context.Context, keepsFresh bool, op func(*physConn) error) error {
	if err := cn.bind(ctx); err != nil {
		return err
	}
	for newTries := 0; ; {
		pc := cn.pc
		start := cn.c.obs.now()
		err := op(pc)
		cn.c.obs.statement(cn.g, start, ctx, err)
		if err == nil || !lostBeforeRun(err, pc) {
			if !keepsFresh {
				cn.fresh = false
			}
			return err
		}
		pc.broken = true
		if !cn.fresh {
			// Session state (a transaction, a pinned connection's settings) died with pc:
			// database/sql does not retry here, and the caller must see the failure.
			return err
		}
		if !pc.used {
			if newTries++; newTries == maxPhysicalTries {
				return fmt.Errorf("gated: %d new physical connections failed: %w", newTries, hideBadConn(err))
			}
		}
		if err := cn.replace(ctx); err != nil {
			return err
		}
	}
}

// lostBeforeRun reports whether err means the statement did not run because pc was already
// gone. The driver says so with driver.ErrBadConn. Otherwise a connection that had been idle in
// the pool, is closed now, and answered its first statement with the server's termination notice
// (SQLSTATE 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now:
// pg_terminate_backend or a restart while idle), which aborts and rolls back a statement with its
// implicit transaction, so running it on another connection is safe. (sockCheck catches most dead
// connections before anything is sent; this covers a termination that lands just after the
// check.) A reset or broken pipe is not replayed: a proxy may reset a connection after it
// forwarded the statement.
func lostBeforeRun(err error, pc *physConn) bool {
	if errors.Is(err, driver.ErrBadConn) {
		return true
	}
	if !pc.used || pc.alive() {
		return false
	}
	switch sqlState(err) {
	case "57P01", "57P02", "57P03":
		return true
	}
	return false
}

// replace destroys the broken physical connection and binds another, keeping the permit.
func (cn *conn) replace(ctx context.Context) error {
	old := cn.pc
	cn.pc = nil
	old.closedFor = CloseDeadIdle
	cn.c.pool.destroyAsync(old, nil)
	pc, err := cn.c.pool.ready(ctx, nil)
	if err != nil {
		return err
	}
	cn.pc = pc
	return nil
}

// PrepareContext binds the connection and prepares query on the physical connection, so that
// errors in the query surface here as with any driver. The returned statement is virtual: it
// binds again for every use after this binding ends.
func (cn *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var numInput int
	err := cn.run(ctx, true, func(pc *physConn) error {
		st, err := pc.prepare(ctx, query)
		if err == nil {
			numInput = st.NumInput()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &stmt{cn: cn, query: query, numInput: numInput}, nil
}

// Prepare is PrepareContext without a context.
func (cn *conn) Prepare(query string) (driver.Stmt, error) {
	return cn.PrepareContext(context.Background(), query)
}

// BeginTx binds the connection and begins a transaction on the physical connection.
func (cn *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var inner driver.Tx
	err := cn.run(ctx, false, func(pc *physConn) (err error) {
		inner, err = pc.begin(ctx, opts)
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
		res, err = pc.exec(ctx, query, args)
		return err
	})
	return res, err
}

// QueryContext binds the connection and runs query on the physical connection. The driver's rows
// are returned as they are: database/sql keeps the connection, and so the binding, until
// rows.Close.
func (cn *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	var rows driver.Rows
	err := cn.run(ctx, false, func(pc *physConn) (err error) {
		rows, err = pc.query(ctx, query, args)
		return err
	})
	return rows, err
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
	cn.fresh = false // the caller may create session state behind the wrapper's back
	return cn.pc.conn, nil
}
