// Package fakedb is an in-memory database/sql driver for gated's unit tests. It understands a
// tiny query language (see [Driver]), injects faults on demand and records how it was used, so
// tests can check the wrapper's plumbing without a real database.
//
// Every [Driver] is an independent instance with its own counters and state; all its methods are
// safe for concurrent use. The fake starts no goroutines.
package fakedb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Error is the error returned for `FAIL <text>` and other ordinary SQL errors. It leaves the
// connection healthy.
type Error struct {
	Msg string
}

// Error implements error.
func (e *Error) Error() string { return "fakedb: " + e.Msg }

// Remove is an argument value that a modern connection's NamedValueChecker answers with
// driver.ErrRemoveArgument, so the argument is dropped before the driver sees it.
type Remove struct{}

// Option configures a [Driver] made by [New].
type Option func(*options)

type options struct {
	legacy        bool
	noChecker     bool
	colConverter  bool
	breakOnCancel bool
}

// Legacy makes connections implement only driver.Conn (Prepare, Close, Begin), statements only
// driver.Stmt, transactions only driver.Tx and rows only driver.Rows. The value to register is
// then [Driver.SQLDriver] (or use [Driver.Register]), which implements only driver.Driver.
func Legacy() Option { return func(o *options) { o.legacy = true } }

// NoChecker removes driver.NamedValueChecker from modern connections, so database/sql's default
// argument conversion applies.
func NoChecker() Option { return func(o *options) { o.noChecker = true } }

// ColumnConverterStmt makes statements implement driver.ColumnConverter. The converter turns a
// []string into its elements joined by commas and converts everything else with
// driver.DefaultParameterConverter.
func ColumnConverterStmt() Option { return func(o *options) { o.colConverter = true } }

// BreakOnCancel marks a connection broken when a BLOCK on it ends because its context ended
// (as a driver whose connection is left busy after a cancel): IsValid then returns false,
// ResetSession and every further call return driver.ErrBadConn.
func BreakOnCancel() Option { return func(o *options) { o.breakOnCancel = true } }

// Driver is one fake database. It implements driver.Driver and driver.DriverContext and
// understands these queries (exact, case-sensitive; `?` and `$n` placeholders are only counted
// for NumInput; parts separated by ";" become separate result sets or are executed in turn):
//
//	SELECT <int>   one row, one column "v" holding the int64
//	SELECT CONNID  one row, one column "v" holding the connection's id (int64)
//	ECHO ...       one row, columns c1..cN holding the N arguments as the driver received them
//	BLOCK <name>   blocks until Release(name) or the context ends (then returns ctx.Err())
//	FAIL <text>    returns &Error{Msg: text}; the connection stays healthy
//	BADCONN        marks the connection broken and returns driver.ErrBadConn
//
// Any other text succeeds when executed (RowsAffected 1 per part) and is an *Error when queried.
// BLOCK in a Legacy statement has no context, so only Release ends it.
type Driver struct {
	opts options

	nextConnID atomic.Int64

	// Fault injection.
	failNextConnect  atomic.Pointer[error]
	failConnects     atomic.Pointer[error]
	breakNext        atomic.Int64
	failNextCommit   atomic.Pointer[error]
	failNextRollback atomic.Pointer[error]
	closeDelay       atomic.Int64 // time.Duration

	// Counters.
	opened, closed, open, maxOpen   atomic.Int64
	inUse, inUseMax                 atomic.Int64
	resets, validations, prepares   atomic.Int64
	execs, queries, begins, commits atomic.Int64
	rollbacks, pings                atomic.Int64
	rowsOpen, stmtsOpen             atomic.Int64
	violations, doubleCloses        atomic.Int64

	mu           sync.Mutex
	conns        map[int64]*conn
	gates        map[string]*gate
	blockChanged chan struct{} // closed and replaced whenever a gate's blocked count changes
	argsSeen     []any
	lastTxOpts   driver.TxOptions
	lastDSN      string
}

// gate is the state of one BLOCK name.
type gate struct {
	released chan struct{} // closed by Release
	blocked  int
}

// New returns a new, independent fake database.
func New(opts ...Option) *Driver {
	d := &Driver{
		conns:        make(map[int64]*conn),
		gates:        make(map[string]*gate),
		blockChanged: make(chan struct{}),
	}
	for _, o := range opts {
		o(&d.opts)
	}
	return d
}

var registered atomic.Int64

// Register registers [Driver.SQLDriver] with database/sql under a new unique name such as
// "fakedb-7" and returns the name.
func (d *Driver) Register() string {
	name := fmt.Sprintf("fakedb-%d", registered.Add(1))
	sql.Register(name, d.SQLDriver())
	return name
}

// SQLDriver returns the value to register with database/sql: d itself, or with [Legacy] a
// wrapper that implements only driver.Driver (d itself always implements DriverContext too).
func (d *Driver) SQLDriver() driver.Driver {
	if d.opts.legacy {
		return legacyDriver{d}
	}
	return d
}

// legacyDriver hides OpenConnector.
type legacyDriver struct{ d *Driver }

// Open implements driver.Driver.
func (l legacyDriver) Open(dsn string) (driver.Conn, error) { return l.d.Open(dsn) }

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.DriverContext = (*Driver)(nil)
	_ driver.Driver        = legacyDriver{}
	_ driver.Connector     = (*connector)(nil)
)

// Open implements driver.Driver; the DSN is only recorded (see [Driver.LastDSN]).
func (d *Driver) Open(dsn string) (driver.Conn, error) {
	return d.connect(context.Background(), dsn)
}

// OpenConnector implements driver.DriverContext; it never fails.
func (d *Driver) OpenConnector(dsn string) (driver.Connector, error) {
	return &connector{d: d, dsn: dsn}, nil
}

type connector struct {
	d   *Driver
	dsn string
}

// Connect implements driver.Connector.
func (c *connector) Connect(ctx context.Context) (driver.Conn, error) { return c.d.connect(ctx, c.dsn) }

// Driver implements driver.Connector.
func (c *connector) Driver() driver.Driver { return c.d.SQLDriver() }

func (d *Driver) connect(ctx context.Context, dsn string) (driver.Conn, error) {
	d.mu.Lock()
	d.lastDSN = dsn
	d.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if errp := d.failNextConnect.Swap(nil); errp != nil {
		return nil, *errp
	}
	if errp := d.failConnects.Load(); errp != nil {
		return nil, *errp
	}
	c := &conn{d: d, id: d.nextConnID.Add(1)}
	d.mu.Lock()
	d.conns[c.id] = c
	d.mu.Unlock()
	d.opened.Add(1)
	storeMax(&d.maxOpen, d.open.Add(1))
	switch {
	case d.opts.legacy:
		return legacyConn{c}, nil
	case d.opts.noChecker:
		return noCheckConn{legacyConn{c}}, nil
	default:
		return modernConn{noCheckConn{legacyConn{c}}}, nil
	}
}

// storeMax raises m to at least v.
func storeMax(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

// FailNextConnect makes the next connection attempt return err.
func (d *Driver) FailNextConnect(err error) { d.failNextConnect.Store(&err) }

// FailConnects makes every connection attempt return err until [Driver.AllowConnects].
func (d *Driver) FailConnects(err error) { d.failConnects.Store(&err) }

// AllowConnects undoes [Driver.FailConnects].
func (d *Driver) AllowConnects() { d.failConnects.Store(nil) }

// BreakNextOp makes the next operation (Prepare, Exec, Query, Begin or Ping, on a connection or a
// statement) on any connection mark that connection broken and return driver.ErrBadConn before
// doing anything. Calling it n times breaks the next n operations.
func (d *Driver) BreakNextOp() { d.breakNext.Add(1) }

// takeBreakNext consumes one armed BreakNextOp, if any.
func (d *Driver) takeBreakNext() bool {
	for {
		n := d.breakNext.Load()
		if n <= 0 {
			return false
		}
		if d.breakNext.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// FailNextCommit makes the next Commit end the transaction and return err (an err wrapping
// driver.ErrBadConn also marks the connection broken).
func (d *Driver) FailNextCommit(err error) { d.failNextCommit.Store(&err) }

// FailNextRollback makes the next Rollback end the transaction and return err (an err wrapping
// driver.ErrBadConn also marks the connection broken).
func (d *Driver) FailNextRollback(err error) { d.failNextRollback.Store(&err) }

// BreakAll marks every open connection broken, as after a server restart.
func (d *Driver) BreakAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.broken.Store(true)
	}
}

// CloseDelay makes every later connection Close take dur (0 restores immediate closes). The
// connection counts as open until its Close returns.
func (d *Driver) CloseDelay(dur time.Duration) { d.closeDelay.Store(int64(dur)) }

// Release opens the gate name: every call blocked in `BLOCK name` returns, and later
// `BLOCK name` calls do not block.
func (d *Driver) Release(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gateLocked(name)
	select {
	case <-g.released:
	default:
		close(g.released)
	}
}

// Blocked returns how many calls are blocked in `BLOCK name` now.
func (d *Driver) Blocked(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gateLocked(name).blocked
}

// WaitBlocked waits until at least n calls are blocked in `BLOCK name`. It gives up when ctx
// ends, or after 10 seconds when ctx has no deadline.
func (d *Driver) WaitBlocked(ctx context.Context, name string, n int) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	for {
		d.mu.Lock()
		got, changed := d.gateLocked(name).blocked, d.blockChanged
		d.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("fakedb: %d of %d calls blocked on %q: %w", got, n, name, ctx.Err())
		}
	}
}

func (d *Driver) gateLocked(name string) *gate {
	g := d.gates[name]
	if g == nil {
		g = &gate{released: make(chan struct{})}
		d.gates[name] = g
	}
	return g
}

// addBlockedLocked changes a gate's blocked count and wakes WaitBlocked callers.
func (d *Driver) addBlockedLocked(g *gate, delta int) {
	g.blocked += delta
	close(d.blockChanged)
	d.blockChanged = make(chan struct{})
}

// block implements `BLOCK name`.
func (d *Driver) block(ctx context.Context, name string) error {
	d.mu.Lock()
	g := d.gateLocked(name)
	d.addBlockedLocked(g, 1)
	d.mu.Unlock()
	var err error
	select {
	case <-g.released:
	case <-ctx.Done():
		err = ctx.Err()
	}
	d.mu.Lock()
	d.addBlockedLocked(g, -1)
	d.mu.Unlock()
	return err
}

// Stats is a snapshot of a [Driver]'s counters. Call counts include calls that failed.
type Stats struct {
	Opened, Closed int64 // connections opened and closed in total
	Open, MaxOpen  int64 // connections open now, and the most open at once
	// InUse is the number of connections inside a driver call now; InUseMax the most at once.
	InUse, InUseMax int64
	Resets          int64 // ResetSession calls
	Validations     int64 // IsValid calls
	Prepares        int64 // Prepare/PrepareContext calls
	Execs, Queries  int64 // Exec and Query calls, on connections and statements
	Begins          int64 // Begin/BeginTx calls
	Commits         int64 // Commit calls
	Rollbacks       int64 // Rollback calls
	Pings           int64 // Ping calls
	RowsOpen        int64 // driver.Rows returned and not yet closed
	StmtsOpen       int64 // driver.Stmts returned and not yet closed
}

// Stats returns a snapshot of d's counters.
func (d *Driver) Stats() Stats {
	return Stats{
		Opened: d.opened.Load(), Closed: d.closed.Load(),
		Open: d.open.Load(), MaxOpen: d.maxOpen.Load(),
		InUse: d.inUse.Load(), InUseMax: d.inUseMax.Load(),
		Resets: d.resets.Load(), Validations: d.validations.Load(),
		Prepares: d.prepares.Load(), Execs: d.execs.Load(), Queries: d.queries.Load(),
		Begins: d.begins.Load(), Commits: d.commits.Load(), Rollbacks: d.rollbacks.Load(),
		Pings: d.pings.Load(), RowsOpen: d.rowsOpen.Load(), StmtsOpen: d.stmtsOpen.Load(),
	}
}

// ConcurrentUseViolations returns how many driver calls entered a connection while another call
// was inside it (database/sql and the wrapper must never do this).
func (d *Driver) ConcurrentUseViolations() int64 { return d.violations.Load() }

// DoubleCloses returns how many times Close was called on an already closed connection.
func (d *Driver) DoubleCloses() int64 { return d.doubleCloses.Load() }

// ArgsSeen returns the arguments of the most recent Exec call or ECHO query as the driver
// received them, after database/sql's conversion; their dynamic types are the Go types received.
func (d *Driver) ArgsSeen() []any {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.argsSeen)
}

// LastTxOptions returns the options of the most recent Begin/BeginTx call.
func (d *Driver) LastTxOptions() driver.TxOptions {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastTxOpts
}

// LastDSN returns the DSN of the most recent connection attempt.
func (d *Driver) LastDSN() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastDSN
}

// OpenConns returns the ids of the connections open now, in increasing order.
func (d *Driver) OpenConns() []int64 {
	d.mu.Lock()
	ids := make([]int64, 0, len(d.conns))
	for id := range d.conns {
		ids = append(ids, id)
	}
	d.mu.Unlock()
	slices.Sort(ids)
	return ids
}
