package fakedb

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// conn is the state of one fake connection. The exported driver methods live on the wrapper
// types below, so that each mode exposes exactly its set of optional interfaces.
type conn struct {
	d      *Driver
	id     int64
	inCall atomic.Bool // a driver call is inside this connection
	closed atomic.Bool // Close was called
	broken atomic.Bool // every further call returns driver.ErrBadConn

	mu       sync.Mutex
	inTx     bool
	openRows int
	closes   int
}

// legacyConn implements only driver.Conn.
type legacyConn struct{ c *conn }

// noCheckConn implements every modern optional interface except driver.NamedValueChecker.
type noCheckConn struct{ legacyConn }

// modernConn implements every modern optional interface.
type modernConn struct{ noCheckConn }

var (
	_ driver.Conn = legacyConn{}

	_ driver.Conn               = noCheckConn{}
	_ driver.ConnPrepareContext = noCheckConn{}
	_ driver.ConnBeginTx        = noCheckConn{}
	_ driver.ExecerContext      = noCheckConn{}
	_ driver.QueryerContext     = noCheckConn{}
	_ driver.Pinger             = noCheckConn{}
	_ driver.SessionResetter    = noCheckConn{}
	_ driver.Validator          = noCheckConn{}

	_ driver.NamedValueChecker = modernConn{}

	_ driver.Tx = (*tx)(nil)
)

// Prepare implements driver.Conn.
func (l legacyConn) Prepare(query string) (driver.Stmt, error) { return l.c.prepare(query) }

// Close implements driver.Conn.
func (l legacyConn) Close() error { return l.c.close() }

// Begin implements driver.Conn.
func (l legacyConn) Begin() (driver.Tx, error) { return l.c.begin(driver.TxOptions{}) }

// PrepareContext implements driver.ConnPrepareContext.
func (n noCheckConn) PrepareContext(_ context.Context, query string) (driver.Stmt, error) {
	return n.c.prepare(query)
}

// BeginTx implements driver.ConnBeginTx; the options are recorded (see Driver.LastTxOptions).
func (n noCheckConn) BeginTx(_ context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return n.c.begin(opts)
}

// ExecContext implements driver.ExecerContext.
func (n noCheckConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return n.c.exec(ctx, query, args)
}

// QueryContext implements driver.QueryerContext.
func (n noCheckConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return n.c.query(ctx, query, args)
}

// Ping implements driver.Pinger.
func (n noCheckConn) Ping(context.Context) error { return n.c.ping() }

// ResetSession implements driver.SessionResetter.
func (n noCheckConn) ResetSession(context.Context) error { return n.c.resetSession() }

// IsValid implements driver.Validator.
func (n noCheckConn) IsValid() bool { return n.c.isValid() }

// CheckNamedValue implements driver.NamedValueChecker. Like pgx it accepts every value as is,
// except that a [Remove] is dropped (driver.ErrRemoveArgument) and a driver.Valuer gets
// database/sql's default conversion (driver.ErrSkip).
func (modernConn) CheckNamedValue(nv *driver.NamedValue) error {
	switch nv.Value.(type) {
	case Remove:
		return driver.ErrRemoveArgument
	case driver.Valuer:
		return driver.ErrSkip
	}
	return nil
}

// enter starts a driver call on c. It records concurrent use (entered is false when another call
// was already inside; pass it to exit) and returns driver.ErrBadConn when c is closed or broken
// or, for an operation (op), when BreakNextOp is armed.
func (c *conn) enter(op bool) (entered bool, err error) {
	if c.inCall.CompareAndSwap(false, true) {
		entered = true
		storeMax(&c.d.inUseMax, c.d.inUse.Add(1))
	} else {
		c.d.violations.Add(1)
	}
	switch {
	case c.closed.Load() || c.broken.Load():
		err = driver.ErrBadConn
	case op && c.d.takeBreakNext():
		c.broken.Store(true)
		err = driver.ErrBadConn
	}
	return entered, err
}

// exit ends a driver call started by enter.
func (c *conn) exit(entered bool) {
	if entered {
		c.d.inUse.Add(-1)
		c.inCall.Store(false)
	}
}

func (c *conn) prepare(query string) (driver.Stmt, error) {
	c.d.prepares.Add(1)
	entered, err := c.enter(true)
	defer c.exit(entered)
	if err != nil {
		return nil, err
	}
	c.d.stmtsOpen.Add(1)
	s := &stmt{c: c, text: query, numInput: countPlaceholders(query)}
	legacy, conv := c.d.opts.legacy, c.d.opts.colConverter
	switch {
	case legacy && conv:
		return legacyConvStmt{legacyStmt{s}}, nil
	case legacy:
		return legacyStmt{s}, nil
	case conv:
		return modernConvStmt{modernStmt{legacyStmt{s}}}, nil
	default:
		return modernStmt{legacyStmt{s}}, nil
	}
}

func (c *conn) exec(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.d.execs.Add(1)
	entered, err := c.enter(true)
	defer c.exit(entered)
	if err != nil {
		return nil, err
	}
	c.d.recordArgs(args)
	n, err := c.run(ctx, query, args, nil)
	if err != nil {
		return nil, err
	}
	return driver.RowsAffected(n), nil
}

func (c *conn) query(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.d.queries.Add(1)
	entered, err := c.enter(true)
	defer c.exit(entered)
	if err != nil {
		return nil, err
	}
	var sets []resultSet
	if _, err := c.run(ctx, query, args, &sets); err != nil {
		return nil, err
	}
	c.d.rowsOpen.Add(1)
	c.mu.Lock()
	c.openRows++
	c.mu.Unlock()
	r := &rows{c: c, sets: sets}
	if c.d.opts.legacy {
		return legacyRows{r}, nil
	}
	return modernRows{legacyRows{r}}, nil
}

func (c *conn) begin(opts driver.TxOptions) (driver.Tx, error) {
	c.d.begins.Add(1)
	c.d.mu.Lock()
	c.d.lastTxOpts = opts
	c.d.mu.Unlock()
	entered, err := c.enter(true)
	defer c.exit(entered)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inTx {
		return nil, &Error{Msg: "already in a transaction"}
	}
	c.inTx = true
	return &tx{c: c}, nil
}

func (c *conn) ping() error {
	c.d.pings.Add(1)
	entered, err := c.enter(true)
	defer c.exit(entered)
	return err
}

// resetSession returns driver.ErrBadConn for a closed or broken connection and for one left
// inside a transaction.
func (c *conn) resetSession() error {
	c.d.resets.Add(1)
	entered, err := c.enter(false)
	defer c.exit(entered)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inTx {
		return driver.ErrBadConn
	}
	return nil
}

// isValid reports whether c is open, not broken, not in a transaction and has no open rows.
func (c *conn) isValid() bool {
	c.d.validations.Add(1)
	entered, err := c.enter(false)
	defer c.exit(entered)
	c.mu.Lock()
	defer c.mu.Unlock()
	return err == nil && !c.inTx && c.openRows == 0
}

// close marks c closed; with Driver.CloseDelay it then waits before counting c as closed.
func (c *conn) close() error {
	entered, _ := c.enter(false)
	defer c.exit(entered)
	c.mu.Lock()
	c.closes++
	first := c.closes == 1
	c.mu.Unlock()
	if !first {
		c.d.doubleCloses.Add(1)
		return nil
	}
	c.closed.Store(true)
	if delay := time.Duration(c.d.closeDelay.Load()); delay > 0 {
		t := time.NewTimer(delay)
		<-t.C
	}
	c.d.mu.Lock()
	delete(c.d.conns, c.id)
	c.d.mu.Unlock()
	c.d.open.Add(-1)
	c.d.closed.Add(1)
	return nil
}

// tx is a transaction on a conn; it implements driver.Tx only.
type tx struct {
	c    *conn
	done atomic.Bool
}

// Commit implements driver.Tx.
func (t *tx) Commit() error {
	t.c.d.commits.Add(1)
	return t.end(&t.c.d.failNextCommit)
}

// Rollback implements driver.Tx.
func (t *tx) Rollback() error {
	t.c.d.rollbacks.Add(1)
	return t.end(&t.c.d.failNextRollback)
}

// end ends the transaction, returning the armed failure from failNext if any.
func (t *tx) end(failNext *atomic.Pointer[error]) error {
	c := t.c
	entered, err := c.enter(false)
	defer c.exit(entered)
	if err != nil {
		return err
	}
	if t.done.Swap(true) {
		return &Error{Msg: "transaction already ended"}
	}
	c.mu.Lock()
	c.inTx = false
	c.mu.Unlock()
	if errp := failNext.Swap(nil); errp != nil {
		if errors.Is(*errp, driver.ErrBadConn) {
			c.broken.Store(true)
		}
		return *errp
	}
	return nil
}
