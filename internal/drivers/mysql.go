package drivers

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/gatedsql/gated/internal/sockconn"
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
// connection running, at most CleanupWait.
//
// The connection id comes from SELECT CONNECTION_ID(), run once on every new connection, before it
// serves anything: when the id is needed the connection is already closed. Ids are unique only
// within one run of one server, so the same query reads @@server_id, and the killing session
// kills only on the server, and in the run of it, where the connection was opened: after a
// restart or a failover the id may name another session.
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

func newMySQL(name, source string) (driver.Connector, Wrap, error) {
	ic, _, err := newGeneric(name, source)
	if err != nil {
		return nil, nil, err
	}
	mc, wrap := NewMySQL(ic)
	return mc, wrap, nil
}

// NewMySQL returns the connector that makes connections of ic, go-sql-driver/mysql's connector
// (New gives it the registered driver's), learning each one's id, and the Wrap of its connections.
func NewMySQL(ic driver.Connector) (driver.Connector, Wrap) {
	mc := &mysqlConnector{inner: ic}
	mc.killer.connector = ic
	return mc, mc.wrap
}

// mysqlConnector makes connections of the inner connector and learns each one's id, which it
// returns with the connection (dialed) for wrap to take out: it keeps nothing itself.
type mysqlConnector struct {
	inner  driver.Connector
	killer mysqlKiller
}

// mysqlSession identifies a connection's session on the server.
type mysqlSession struct {
	id       int64     // CONNECTION_ID(); 0 if unknown
	serverID int64     // @@server_id
	opened   time.Time // when the session was known to exist
}

var (
	_ driver.Connector = (*mysqlConnector)(nil)
	_ io.Closer        = (*mysqlConnector)(nil)
)

// Connect opens a connection and asks its id. A connection whose id cannot be read is closed:
// gated could not stop its statements. Its error may match driver.ErrBadConn: the pool hides that
// from database/sql in every error of a connection it opens.
func (c *mysqlConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	v, err := queryInts(ctx, dc, "SELECT CONNECTION_ID(), @@server_id", 0, 1)
	if err != nil {
		dc.Close()
		return nil, fmt.Errorf("gated: reading the new MySQL connection's id: %w", err)
	}
	return &dialed{Conn: dc, info: mysqlSession{id: v[0], serverID: v[1], opened: time.Now()}}, nil
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

func (c *mysqlConnector) wrap(dc driver.Conn, _ *sockconn.Conn) Conn {
	var s mysqlSession
	if d, ok := dc.(*dialed); ok {
		dc, s = d.Conn, d.info.(mysqlSession)
	}
	return &mysqlConn{genericConn: genericConn{dc}, session: s, killer: &c.killer}
}

// mysqlConn is a go-sql-driver/mysql connection: the generic driver's knowledge (Validator,
// ErrBadConn) plus its connection id, through which a statement is stopped on the server.
type mysqlConn struct {
	genericConn
	session mysqlSession
	killer  *mysqlKiller
}

// Close closes the connection and, when a call of its last binding ended with its context ended
// and the connection given up by the driver (mayRun: go-sql-driver/mysql closes its socket when a
// context ends during a call, and the server goes on), stops the statement on the server and
// waits until it no longer runs. Nothing else leads to a kill: a connection that failed for
// another reason (a restart, say) may have an id that by now names another session.
func (c *mysqlConn) Close(mayRun bool) {
	c.dc.Close()
	if mayRun && c.session.id != 0 {
		c.killer.stop(c.session)
	}
}

// mysqlKiller is the one session per Connector through which gated stops statements.
type mysqlKiller struct {
	connector driver.Connector

	mu       sync.Mutex
	dc       driver.Conn // nil until first needed and after it failed
	serverID int64       // the session's @@server_id
	started  time.Time   // when the session's server started, to the second
	closed   bool
}

// errKillerClosed is the killer's error once its Connector closed.
var errKillerClosed = errors.New("gated: the connector is closed")

// errOtherServer reports a session opened on another server, or in an earlier run of this one.
var errOtherServer = errors.New("gated: the connection was opened on another MySQL server or before a restart; not killed")

// stop sends KILL QUERY for session s and waits until the process list no longer shows it
// running a command, at most CleanupWait. It gives up early, leaving the statement to the server,
// when the killing session cannot be used or is not on s's server and run.
func (k *mysqlKiller) stop(s mysqlSession) {
	ctx, cancel := context.WithTimeout(context.Background(), CleanupWait)
	defer cancel()
	id := strconv.FormatInt(s.id, 10)
	err := k.do(ctx, func(dc driver.Conn) error {
		// started is exact to a second, and truncated: a later start is a restart.
		if k.serverID != s.serverID || k.started.After(s.opened.Add(time.Second)) {
			return errOtherServer
		}
		// An unknown thread id (the statement and its session already ended) is an error too;
		// the process list tells either way.
		execOn(ctx, dc, "KILL QUERY "+id)
		return nil
	})
	if err != nil {
		return
	}
	q := "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = " + id + " AND COMMAND <> 'Sleep'"
	for pause := time.Millisecond; ; pause = min(2*pause, killWaitStep) {
		var running []int64
		err := k.do(ctx, func(dc driver.Conn) (err error) {
			running, err = queryInts(ctx, dc, q, 0)
			return err
		})
		if err != nil || running[0] == 0 {
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
// failed (the server closed it while it was idle, say). A session is opened with the server's id
// and start; the check before reuse finds one that a restart closed.
func (k *mysqlKiller) do(ctx context.Context, f func(driver.Conn) error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for try := 0; ; try++ {
		if k.closed {
			return errKillerClosed
		}
		fresh := false
		if k.dc == nil {
			if err := k.openLocked(ctx); err != nil {
				return err
			}
			fresh = true
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

func (k *mysqlKiller) openLocked(ctx context.Context) error {
	dc, err := k.connector.Connect(ctx)
	if err != nil {
		return err
	}
	v, err := queryInts(ctx, dc, "SELECT @@server_id", 0)
	if err == nil {
		var up []int64
		// SHOW, not a table: MariaDB has information_schema.GLOBAL_STATUS, MySQL 8 does not.
		if up, err = queryInts(ctx, dc, "SHOW GLOBAL STATUS LIKE 'Uptime'", 1); err == nil {
			k.serverID, k.started = v[0], time.Now().Add(-time.Duration(up[0])*time.Second)
		}
	}
	if err != nil {
		dc.Close()
		return err
	}
	k.dc = dc
	return nil
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

// queryInts runs a query without arguments on dc and returns the integers in the given columns
// of its first row.
func queryInts(ctx context.Context, dc driver.Conn, query string, cols ...int) ([]int64, error) {
	rows, err := queryOn(ctx, dc, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(dest); err != nil {
		if err == io.EOF {
			err = errors.New("gated: " + query + ": no row")
		}
		return nil, err
	}
	out := make([]int64, len(cols))
	for i, col := range cols {
		if col >= len(dest) {
			return nil, fmt.Errorf("gated: %s: no column %d", query, col)
		}
		switch v := dest[col].(type) {
		case int64:
			out[i] = v
		case uint64:
			out[i] = int64(v)
		case []byte:
			out[i], err = strconv.ParseInt(string(v), 10, 64)
		case string:
			out[i], err = strconv.ParseInt(v, 10, 64)
		default:
			err = fmt.Errorf("gated: %s: unexpected %T", query, dest[col])
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
