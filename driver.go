package gated

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"
)

// DriverName is the name gated registers with database/sql.
const DriverName = "gated"

func init() {
	sql.Register(DriverName, &Driver{})
}

// Driver is the database/sql driver registered as "gated". Its OpenConnector parses a DSN with
// [ParseDSN] and returns a [Connector]; database/sql uses that for sql.Open("gated", dsn). The
// Driver returned by a Connector's Driver method is bound to that Connector.
type Driver struct {
	c *Connector // nil for the registered driver
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.DriverContext = (*Driver)(nil)
)

// OpenConnector parses dsn and returns a new Connector with its own gate and pool.
func (d *Driver) OpenConnector(dsn string) (driver.Connector, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	return NewConnector(cfg)
}

var errOpenUnsupported = errors.New("gated: Driver.Open is not supported: a gate belongs to a Connector; use sql.Open, gated.Open or gated.OpenDB")

// Open returns a virtual connection of the Driver's Connector. On the registered driver, which
// has none, it returns an error: a connection opened on its own would have a gate of its own.
// database/sql never calls it, because the driver implements driver.DriverContext.
func (d *Driver) Open(string) (driver.Conn, error) {
	if d.c == nil {
		return nil, errOpenUnsupported
	}
	return d.c.Connect(context.Background())
}

// Open parses dsn and returns a *sql.DB with the recommended settings of [OpenDB]. Like sql.Open
// it does no I/O; errors are those of [ParseDSN] and [NewConnector].
func Open(dsn string) (*sql.DB, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	c, err := NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return OpenDB(c), nil
}

// OpenDB returns a *sql.DB using c, with settings that keep database/sql's own pool from undoing
// the gate: no limit on open connections (a limit below Σ(B+Q) over all workloads would make
// callers queue in database/sql, unbounded, before they reach the gate) and at least Σ(B+Q) idle
// connections (they are virtual: a small struct each, no server connection). Physical lifetimes are the gate's own
// (gate_max_conn_lifetime, gate_max_conn_idle_time), so ConnMaxLifetime stays 0.
func OpenDB(c *Connector) *sql.DB {
	db := sql.OpenDB(c)
	db.SetMaxIdleConns(c.admissionLimit())
	return db
}

// FromDB returns the Connector behind db, if db was opened with gated.
func FromDB(db *sql.DB) (*Connector, bool) {
	d, ok := db.Driver().(*Driver)
	if !ok || d.c == nil {
		return nil, false
	}
	return d.c, true
}

// CheckDB reports an error when db's own pool settings undo its gate: with SetMaxOpenConns(n),
// 0 < n < B+Q (summed over all workloads), callers wait in database/sql, unbounded and before the gate, once n operations
// are inside it. It also reports a db that has already made callers wait (DBStats.WaitCount > 0),
// and a db that was not opened with gated. Call it at startup or in a health check; it does no I/O.
//
// SetConnMaxLifetime and SetConnMaxIdleTime close database/sql's connections, which on a gated
// DB are virtual: they never close a physical connection (gate_max_conn_lifetime and
// gate_max_conn_idle_time do). database/sql offers no way to read either setting, so CheckDB
// reports them once they have closed a connection (DBStats.MaxLifetimeClosed or
// MaxIdleTimeClosed > 0): in a health check, not necessarily at startup.
func CheckDB(db *sql.DB) error {
	c, ok := FromDB(db)
	if !ok {
		return errors.New("gated: CheckDB: the *sql.DB was not opened with the gated driver")
	}
	s := db.Stats()
	if limit := c.admissionLimit(); s.MaxOpenConnections > 0 && s.MaxOpenConnections < limit {
		return fmt.Errorf("gated: SetMaxOpenConns(%d) is below B+Q = %d: callers queue in database/sql before the gate; use 0 or at least %d",
			s.MaxOpenConnections, limit, limit)
	}
	if s.WaitCount > 0 {
		return fmt.Errorf("gated: %d callers waited in database/sql's pool for %v: raise or remove SetMaxOpenConns", s.WaitCount, s.WaitDuration)
	}
	if s.MaxLifetimeClosed > 0 {
		return fmt.Errorf("gated: SetConnMaxLifetime closed %d of database/sql's connections, which are virtual on a gated DB: it closes no physical connection; remove it and set gate_max_conn_lifetime (now %s)",
			s.MaxLifetimeClosed, noneOr(c.cfg.MaxConnLifetime))
	}
	if s.MaxIdleTimeClosed > 0 {
		return fmt.Errorf("gated: SetConnMaxIdleTime closed %d of database/sql's connections, which are virtual on a gated DB: it closes no physical connection; remove it and set gate_max_conn_idle_time (now %s)",
			s.MaxIdleTimeClosed, noneOr(c.cfg.MaxConnIdleTime))
	}
	return nil
}

// noneOr returns d as text, or "none" for [None].
func noneOr(d time.Duration) string {
	if d == None {
		return "none"
	}
	return d.String()
}
