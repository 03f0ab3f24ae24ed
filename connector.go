package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"
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
	stmts  stmtRegistry
	obs    observer // the Config's Observer and Logger (observe.go)
	closed atomic.Bool
}

var _ driver.Connector = (*Connector)(nil)

// NewConnector validates cfg (see [Config] for the defaults of zero fields) and returns a
// Connector for it. It does no I/O: the first physical connection opens with the first operation.
// The inner driver must be registered with database/sql (import it), except "pgx" (pgx v5) and
// "postgres" (lib/pq), which gated imports and uses directly. Errors are *[DSNError] naming the
// key at fault, or the inner driver's DSN error with any password removed from its message.
func NewConnector(cfg *Config) (*Connector, error) {
	if cfg == nil {
		return nil, errNilConfig
	}
	c := &Connector{cfg: *cfg.Clone()}
	if err := c.cfg.normalize(); err != nil {
		return nil, err
	}
	inner, wrap, err := newInner(c.cfg.Driver, c.cfg.DSN)
	if err != nil {
		return nil, err
	}
	c.drv.c = c
	c.pool = newPool(inner, wrap, c.cfg.MaxConns, c.cfg.MaxConnLifetime, c.cfg.MaxConnIdleTime)
	c.gate = newGate(c.cfg.Concurrent, c.cfg.Queue, c.cfg.QueueWait, c.cfg.QueueOrder == QueueAdaptive, c.pool)
	c.initObserve()
	return c, nil
}

var errNilConfig = errors.New("gated: NewConnector: nil *Config (use gated.NewConfig or gated.ParseDSN)")

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
