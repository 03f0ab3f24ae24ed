package gated

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
)

// newGenericInner returns the connector of any driver registered with database/sql. gated does
// not see such a driver's sockets, so it knows only what database/sql itself promises: a driver
// returns driver.ErrBadConn only when nothing reached the server, and driver.Validator says
// whether a connection is still usable. The permit comes back when the driver returns; work the
// server goes on with after a cancel is not awaited.
func newGenericInner(name, dsn string) (driver.Connector, func(driver.Conn, *sockConn) innerConn, error) {
	if !slices.Contains(sql.Drivers(), name) {
		return nil, nil, &DSNError{Key: keyDriver, Err: fmt.Errorf("driver %s is not registered with database/sql (forgotten import?)", shownValue(name))}
	}
	db, err := sql.Open(name, dsn) // only to reach the registered driver.Driver; opens nothing
	if err != nil {
		return nil, nil, fmt.Errorf("gated: inner driver %q: %w", name, redactErr(err, dsn))
	}
	d := db.Driver()
	db.Close()
	if dc, ok := d.(driver.DriverContext); ok {
		ic, err := dc.OpenConnector(dsn)
		if err != nil {
			return nil, nil, fmt.Errorf("gated: inner driver %q: %w", name, redactErr(err, dsn))
		}
		return ic, newGenericConn, nil
	}
	return dsnConnector{dsn: dsn, d: d}, newGenericConn, nil
}

// dsnConnector adapts a driver without driver.DriverContext, as database/sql does.
type dsnConnector struct {
	dsn string
	d   driver.Driver
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

func newGenericConn(dc driver.Conn, _ *sockConn) innerConn { return genericConn{dc} }

type genericConn struct{ dc driver.Conn }

func (c genericConn) alive() bool {
	if v, ok := c.dc.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c genericConn) idle() bool        { return c.alive() }
func (genericConn) txStatus() byte      { return '?' }
func (genericConn) watchesSocket() bool { return false }
func (c genericConn) close(bool)        { c.dc.Close() }
func (c genericConn) sent() int64       { return -1 }

// unsent trusts the driver, as database/sql does.
func (c genericConn) unsent(err error, _ int64) bool { return errors.Is(err, driver.ErrBadConn) }

// commitUnknown: the connection is gone, the server did not answer with an error, and the driver
// did not say that nothing was sent.
func (c genericConn) commitUnknown(err error, _ int64) bool {
	return !c.alive() && sqlState(err) == "" && !errors.Is(err, driver.ErrBadConn)
}

func (c genericConn) endFailedTx() bool { return c.alive() && sendRollback(c.dc, context.Background()) }

func (genericConn) checkBeforeWrite() {}

// beginSet and execSet: Config.normalize refuses the timeouts for drivers other than pgx and
// lib/pq, whose SQL gated cannot know; these follow PostgreSQL's in case one reaches them.
func (c genericConn) beginSet(ctx context.Context, opts driver.TxOptions, set string) (driver.Tx, error) {
	return beginThenSet(ctx, c.dc, opts, set)
}

func (c genericConn) execSet(ctx context.Context, set string) error {
	return execSimple(ctx, c.dc, set)
}

// closeStmts: statements of an unknown driver may hold client-side resources (SQLite's do).
func (genericConn) closeStmts() bool { return true }

func (genericConn) staleStatement(error) bool { return false }
func (genericConn) refusedStale(error) bool   { return false }

// serverPrepares: an unknown driver prepares as it always does.
func (genericConn) serverPrepares(string) bool { return true }
