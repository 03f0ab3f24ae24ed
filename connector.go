package gated

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/lib/pq"
)

// A Connector is a gate and the physical connection pool behind it. It implements
// driver.Connector: use it with [OpenDB] (or sql.OpenDB), or let sql.Open("gated", dsn) make one.
// Connect hands out virtual connections that bind to a physical connection only while an
// operation runs; see the package documentation.
//
// A Connector is safe for concurrent use. Close it by closing the *sql.DB that uses it.
type Connector struct {
	cfg    Config
	drv    Driver
	pool   *pool
	gate   *gate
	obs    observer // the Config's Observer and Logger (observe.go)
	closed atomic.Bool
}

var _ driver.Connector = (*Connector)(nil)

// NewConnector validates cfg (see [Config] for the defaults of zero fields) and returns a
// Connector for it. It does no I/O: the first physical connection opens with the first operation.
// The inner driver must be registered with database/sql (import it), except "pgx" and "postgres"
// (lib/pq), which gated imports. Errors are *[DSNError] naming the key at fault, or the inner
// driver's DSN error with any password removed.
func NewConnector(cfg *Config) (*Connector, error) {
	c := &Connector{cfg: *cfg.Clone()}
	if err := c.cfg.normalize(); err != nil {
		return nil, err
	}
	inner, err := innerConnector(c.cfg.Driver, c.cfg.DSN)
	if err != nil {
		return nil, err
	}
	c.drv.c = c
	c.pool = newPool(inner, c.cfg.MaxConns, c.cfg.MaxConnLifetime, c.cfg.MaxConnIdleTime)
	c.gate = newGate(c.cfg.Concurrent, c.cfg.Queue, c.cfg.QueueWait, c.cfg.QueueOrder == QueueAdaptive, c.pool)
	c.initObserve()
	return c, nil
}

// innerConnector returns the driver.Connector of the inner driver for dsn.
//
// pgx keeps its default handling of an ended context: it closes the connection in the background,
// sending a cancel request and then reading until the backend hangs up, and gated releases the
// permit when that is done (pgconn.CleanupDone). pgx's alternative, a cancel request on a
// connection that stays in use, is racy: the request can arrive late and cancel the connection's
// next statement, and pgx pads every cancelled call with 100 ms to make that less likely.
func innerConnector(name, dsn string) (driver.Connector, error) {
	if name == "postgres" {
		// lib/pq, with connections that close only once the server is done (see drainingConn).
		pc, err := pq.NewConnector(dsn)
		if err != nil {
			return nil, fmt.Errorf("gated: inner driver %q: %s", name, redact(err.Error(), dsn))
		}
		pc.Dialer(drainingDialer{})
		return pc, nil
	}
	if !slices.Contains(sql.Drivers(), name) {
		return nil, &DSNError{Key: "gate_driver", Err: fmt.Errorf("driver %s is not registered with database/sql (forgotten import?)", shownValue(name))}
	}
	db, err := sql.Open(name, dsn) // only to reach the registered driver.Driver; opens nothing
	if err != nil {
		return nil, fmt.Errorf("gated: inner driver %q: %s", name, redact(err.Error(), dsn))
	}
	d := db.Driver()
	db.Close()
	if dc, ok := d.(driver.DriverContext); ok {
		ic, err := dc.OpenConnector(dsn)
		if err != nil {
			return nil, fmt.Errorf("gated: inner driver %q: %s", name, redact(err.Error(), dsn))
		}
		return ic, nil
	}
	return dsnConnector{dsn: dsn, d: d}, nil
}

// dsnConnector adapts a driver without driver.DriverContext, as database/sql does.
type dsnConnector struct {
	dsn string
	d   driver.Driver
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

// Connect returns a new virtual connection. It does no I/O and cannot fail, except after Close.
func (c *Connector) Connect(context.Context) (driver.Conn, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	return &conn{c: c}, nil
}

// Driver returns a gated [Driver] bound to this Connector, which [FromDB] recognizes.
func (c *Connector) Driver() driver.Driver { return &c.drv }

// Close closes the gate and every idle physical connection, and waits for connections being
// destroyed. Waiting operations fail with [ErrClosed]; running ones keep their connection until
// they end, and it is closed then. database/sql's DB.Close calls it. Close is idempotent.
func (c *Connector) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.gate.close()
	c.pool.close()
	c.closeObserve()
	return nil
}

func (c *Connector) isClosed() bool { return c.closed.Load() }

// Config returns a copy of the Connector's configuration, defaults filled in.
func (c *Connector) Config() *Config { return c.cfg.Clone() }

// Stats returns a snapshot of the gate and the physical pool. Safe for concurrent use.
func (c *Connector) Stats() Stats {
	var s Stats
	c.gate.stats(&s)
	c.gate.wl.stats(&s)
	c.pool.stats(&s.Pool)
	return s
}
