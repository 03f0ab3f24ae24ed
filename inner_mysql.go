package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
)

// MySQL and MariaDB through go-sql-driver/mysql (gate_driver=mysql), which the application
// imports; gated does not, and reaches it only through database/sql's driver interfaces.
//
// When a context ends while a statement runs, go-sql-driver/mysql closes its socket at once and
// returns. Unlike PostgreSQL, the server does not notice: MariaDB and MySQL look at the socket
// only when the statement ends, so a SELECT SLEEP(3) goes on for its 3 s, and a permit released
// with the driver's return would let the next operation in while the server still works. gated
// therefore stops the statement itself: KILL QUERY <connection id>, sent over a session of its
// own (a MySQL server takes a kill only from a session, and counts that session against
// max_connections), and keeps the permit until information_schema.PROCESSLIST no longer shows the
// connection running, at most cleanupWait.
//
// The connection id comes from SELECT CONNECTION_ID(), run once on every new connection, before it
// serves anything: when the id is needed the connection is already closed.
//
// The killing session is one connection per Connector beyond P (gate_max_conns), opened on the
// first cancellation and kept until the Connector closes. It is not taken from P: a reserved slot
// would lower the largest B to P-1, forbid P=1 and differ from every other driver's defaults,
// while the kill is needed rarely and then at once, when every slot of P may be busy. The fleet's
// connection budget must count P+1 per Connector for MySQL.
//
// A connection killed while idle (KILL CONNECTION, wait_timeout, a restart) is found by
// go-sql-driver/mysql's ResetSession, which gated calls before a used connection serves again: it
// peeks at the socket (checkConnLiveness, on by default) and reports driver.ErrBadConn, so the
// connection is replaced before anything is sent. With checkConnLiveness=false the next
// statement fails instead. driver.ErrBadConn is otherwise trusted as database/sql trusts it:
// go-sql-driver/mysql returns it only when nothing was written.

// killWaitStep bounds the pause between two looks at the process list after a kill.
const killWaitStep = 20 * time.Millisecond

func newMySQLInner(name, dsn string) (driver.Connector, func(driver.Conn, *sockConn) innerConn, error) {
	ic, _, err := newGenericInner(name, dsn)
	if err != nil {
		return nil, nil, err
	}
	mc := &mysqlConnector{inner: ic}
	mc.killer.connector = ic
	return mc, mc.wrap, nil
}

// mysqlConnector makes connections of the inner connector and learns each one's id.
type mysqlConnector struct {
	inner  driver.Connector
	ids    sync.Map // driver.Conn → connection id, from Connect until wrap takes it
	killer mysqlKiller
}

var (
	_ driver.Connector = (*mysqlConnector)(nil)
	_ io.Closer        = (*mysqlConnector)(nil)
)

// Connect opens a connection and asks its id. A connection whose id cannot be read is closed:
// gated could not stop its statements.
func (c *mysqlConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	id, err := queryInt(ctx, dc, "SELECT CONNECTION_ID()")
	if err != nil {
		dc.Close()
		return nil, fmt.Errorf("gated: reading the new MySQL connection's id: %w", hideBadConn(err))
	}
	c.ids.Store(dc, id)
	return dc, nil
}

func (c *mysqlConnector) Driver() driver.Driver { return c.inner.Driver() }

// Close closes the killing session. The pool calls it when the Connector closes.
func (c *mysqlConnector) Close() error {
	c.killer.close()
	if cl, ok := c.inner.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

func (c *mysqlConnector) wrap(dc driver.Conn, _ *sockConn) innerConn {
	id, _ := c.ids.LoadAndDelete(dc)
	n, _ := id.(int64)
	return &mysqlConn{genericConn: genericConn{dc}, id: n, killer: &c.killer}
}

// mysqlConn is a go-sql-driver/mysql connection: the generic driver's knowledge (Validator,
// ErrBadConn) plus its connection id and whether a statement may be running on it.
type mysqlConn struct {
	genericConn
	id     int64 // 0 if unknown
	killer *mysqlKiller

	// ctx is the context of the operation that last used the connection, nil once it went back
	// idle healthy. The connection is used by one goroutine at a time, and handed to the one
	// that destroys it through the pool's synchronization.
	ctx context.Context
}

func (c *mysqlConn) watch(ctx context.Context) { c.ctx = ctx }
func (c *mysqlConn) rested()                   { c.ctx = nil }

// close closes the connection and, when an operation's context ended while the driver was in
// a call on it (the driver then closes its socket and the server may still run the statement),
// stops the statement on the server and waits until it no longer runs.
//
// Only an ended context leads to a kill. A connection that failed for another reason (the
// server restarted, say) is not killed: its id may by then name another session.
func (c *mysqlConn) close() {
	stop := c.ctx != nil && c.ctx.Err() != nil && !c.alive() && c.id != 0
	c.ctx = nil
	c.dc.Close()
	if stop {
		c.killer.stop(c.id)
	}
}

// mysqlKiller is the one session per Connector through which gated stops statements.
type mysqlKiller struct {
	connector driver.Connector

	mu     sync.Mutex
	dc     driver.Conn // guarded by mu; nil until first needed and after it failed
	closed bool        // guarded by mu
}

// stop sends KILL QUERY id and waits until the process list no longer shows connection id
// running a command, at most cleanupWait. It gives up early, leaving the statement to the server,
// when the killing session cannot be used.
func (k *mysqlKiller) stop(id int64) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupWait)
	defer cancel()
	// An unknown thread id (the statement and its session already ended) is an error too; the
	// process list tells either way.
	k.do(ctx, func(dc driver.Conn) error {
		return execOn(ctx, dc, "KILL QUERY "+strconv.FormatInt(id, 10))
	})
	q := "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = " + strconv.FormatInt(id, 10) + " AND COMMAND <> 'Sleep'"
	for pause := time.Millisecond; ; pause = min(2*pause, killWaitStep) {
		var running int64
		err := k.do(ctx, func(dc driver.Conn) (err error) {
			running, err = queryInt(ctx, dc, q)
			return err
		})
		if err != nil || running == 0 {
			return
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// do runs f on the killing session, opening it when needed and once more when the open one has
// failed (the server closed it while it was idle, say).
func (k *mysqlKiller) do(ctx context.Context, f func(driver.Conn) error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for try := 0; ; try++ {
		if k.closed {
			return ErrClosed
		}
		fresh := false
		if k.dc == nil {
			dc, err := k.connector.Connect(ctx)
			if err != nil {
				return err
			}
			k.dc, fresh = dc, true
		} else if r, ok := k.dc.(driver.SessionResetter); ok && r.ResetSession(ctx) != nil {
			// ResetSession peeks at the socket: the server hung up while the session was idle.
			k.dropLocked()
			continue
		}
		err := f(k.dc)
		if err == nil {
			return nil
		}
		if v, ok := k.dc.(driver.Validator); ok && !v.IsValid() {
			k.dropLocked()
			if !fresh && try == 0 && ctx.Err() == nil {
				continue
			}
		}
		return err
	}
}

func (k *mysqlKiller) dropLocked() {
	k.dc.Close()
	k.dc = nil
}

func (k *mysqlKiller) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	if k.dc != nil {
		k.dropLocked()
	}
}

// execOn runs a statement without arguments on dc, with database/sql's fallbacks.
func execOn(ctx context.Context, dc driver.Conn, query string) error {
	pc := &physConn{conn: dc}
	_, err := pc.exec(ctx, query, nil)
	return err
}

// queryInt runs a query without arguments on dc and returns the integer in its first column of
// its first row.
func queryInt(ctx context.Context, dc driver.Conn, query string) (int64, error) {
	pc := &physConn{conn: dc}
	rows, err := pc.query(ctx, query, nil)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	if len(dest) == 0 {
		return 0, errors.New("gated: " + query + ": no column")
	}
	if err := rows.Next(dest); err != nil {
		if err == io.EOF {
			err = errors.New("gated: " + query + ": no row")
		}
		return 0, err
	}
	switch v := dest[0].(type) {
	case int64:
		return v, nil
	case []byte:
		return strconv.ParseInt(string(v), 10, 64)
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("gated: %s: unexpected %T", query, dest[0])
}
