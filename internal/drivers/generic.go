package drivers

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"

	"github.com/gatedsql/gated/internal/dsn"
	"github.com/gatedsql/gated/internal/sockconn"
)

// newGeneric returns the connector of any driver registered with database/sql. gated does
// not see such a driver's sockets, so it knows only what database/sql itself promises: a driver
// returns driver.ErrBadConn only when nothing reached the server, and driver.Validator says
// whether a connection is still usable. The permit comes back when the driver returns; work the
// server goes on with after a cancel is not awaited.
func newGeneric(name, source string) (driver.Connector, Wrap, error) {
	if !slices.Contains(sql.Drivers(), name) {
		return nil, nil, &SettingError{Setting: SettingDriver, Err: fmt.Errorf("driver %s is not registered with database/sql (forgotten import?)", dsn.ShownValue(name))}
	}
	db, err := sql.Open(name, source) // only to reach the registered driver.Driver; opens nothing
	if err != nil {
		return nil, nil, fmt.Errorf("gated: inner driver %q: %w", name, dsn.RedactError(err, source))
	}
	d := db.Driver()
	db.Close()
	if dc, ok := d.(driver.DriverContext); ok {
		ic, err := dc.OpenConnector(source)
		if err != nil {
			return nil, nil, fmt.Errorf("gated: inner driver %q: %w", name, dsn.RedactError(err, source))
		}
		return ic, NewGeneric, nil
	}
	return dsnConnector{source: source, d: d}, NewGeneric, nil
}

// dsnConnector adapts a driver without driver.DriverContext, as database/sql does.
type dsnConnector struct {
	source string
	d      driver.Driver
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.source) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

func NewGeneric(dc driver.Conn, _ *sockconn.Conn) Conn { return genericConn{dc} }

type genericConn struct{ dc driver.Conn }

func (c genericConn) Alive() bool {
	if v, ok := c.dc.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c genericConn) Idle() bool        { return c.Alive() }
func (genericConn) TxStatus() byte      { return '?' }
func (genericConn) WatchesSocket() bool { return false }
func (c genericConn) Close(bool)        { c.dc.Close() }
func (c genericConn) Sent() int64       { return -1 }

// Unsent trusts the driver, as database/sql does.
func (c genericConn) Unsent(err error, _ int64) bool { return errors.Is(err, driver.ErrBadConn) }

// CommitUnknown: the connection is gone, the server did not answer with an error, and the driver
// did not say that nothing was sent.
func (c genericConn) CommitUnknown(err error, _ int64) bool {
	return !c.Alive() && SQLState(err) == "" && !errors.Is(err, driver.ErrBadConn)
}

func (c genericConn) EndFailedTx() bool { return c.Alive() && sendRollback(c.dc, context.Background()) }

func (genericConn) CheckBeforeWrite() {}

func (genericConn) CheckEveryReuse() bool { return false }

// BeginSet and ExecSet: the root's Config.normalize refuses the timeouts for drivers other than
// pgx and lib/pq, whose SQL gated cannot know; these follow PostgreSQL's in case one reaches them.
func (c genericConn) BeginSet(ctx context.Context, opts driver.TxOptions, set string) (driver.Tx, error) {
	return beginThenSet(ctx, c.dc, opts, set)
}

func (c genericConn) ExecSet(ctx context.Context, set string) error {
	return execSimple(ctx, c.dc, set)
}

// CloseStmts: statements of an unknown driver may hold client-side resources (SQLite's do).
func (genericConn) CloseStmts() bool { return true }

func (genericConn) StaleStatement(error) bool { return false }
func (genericConn) RefusedStale(error) bool   { return false }

// ServerPrepares: an unknown driver prepares as it always does.
func (genericConn) ServerPrepares(string) bool { return true }
