package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The driver seam. Everything gated knows about a particular inner driver sits behind innerConn,
// with one file per driver: inner_pgx.go (pgx v5), inner_pq.go (lib/pq), inner_mysql.go
// (go-sql-driver/mysql, registered by the application's import) and inner_generic.go (any other
// registered driver, with only what database/sql itself promises). The rest of the package
// asks these questions and never looks at a driver's types.

// An innerConn is gated's knowledge of one physical connection of the inner driver.
type innerConn interface {
	// alive reports whether the driver still considers the connection open; true when it
	// cannot tell.
	alive() bool
	// idle reports whether the connection may serve another operation: alive, not busy, and
	// idle on the server (txStatus 'I'); for a driver that cannot report its transaction
	// status ('?'), alive, as database/sql itself judges a connection.
	idle() bool
	// txStatus returns the connection's transaction status as the server last reported it
	// (PostgreSQL's ReadyForQuery: 'I' idle, 'T' in a transaction, 'E' in a failed one), or
	// '?' when the driver does not report it.
	txStatus() byte
	// watchesSocket reports whether the driver cannot interrupt its socket's blocking calls when
	// a context ends (lib/pq): each call then watches its context (see call, sockconn.Watch).
	watchesSocket() bool
	// close closes the connection and returns once the driver's cleanup has ended (pgx's
	// asynchronous cancel and close, the drain of a lib/pq socket whose statement may still
	// run, the kill of a MySQL statement when mayRun), waiting at most cleanupWait. mayRun
	// says that a call ended with its context ended and the connection given up by the driver,
	// so the server may still run its statement. Statements prepared on it are not closed
	// first: the server frees them with the session, and a round trip each could block for as
	// long as a network partition lasts.
	close(mayRun bool)
	// sent returns how many bytes the connection has written to its socket so far, or -1 when
	// gated does not see the socket.
	sent() int64
	// unsent reports whether an operation that failed with err, on a connection that had sent
	// before bytes when it began, certainly sent nothing to the server: only then may it run
	// again on another connection.
	unsent(err error, before int64) bool
	// commitUnknown reports whether a COMMIT that failed with err, begun when the connection
	// had sent before bytes, may have been applied.
	commitUnknown(err error, before int64) bool
	// endFailedTx is called after a COMMIT or ROLLBACK failed. It ends whatever transaction may
	// still be open and reports whether the connection is now known to be outside one, and so
	// reusable.
	endFailedTx() bool
	// checkBeforeWrite makes the next write first check that the server has not hung up or
	// sent something unasked, and fail without sending anything if it has. It is called before
	// a used connection serves another operation, and before COMMIT: a connection that died
	// before the statement was sent must be told from one lost after.
	checkBeforeWrite()
	// staleStatement reports whether err says that a statement the driver itself prepared and
	// cached for an unprepared query is no longer valid on the server (pgx caches statements per
	// connection; a migration or DISCARD ALL invalidates them), so that the server ran nothing
	// and the driver has dropped its cache entry: the query may run once more.
	staleStatement(err error) bool
	// refusedStale reports whether err is the server's refusal of a prepared statement itself,
	// before anything of it ran (staleRefusal); false for drivers whose errors gated cannot read.
	refusedStale(err error) bool
	// beginSet begins a transaction whose first statements are set (SET LOCAL ...): pgx sends
	// them in BEGIN's round trip. On failure no transaction is open, or the connection is not
	// idle and gets destroyed.
	beginSet(ctx context.Context, opts driver.TxOptions, set string) (driver.Tx, error)
	// execSet runs set (SET or RESET statements) outside a transaction.
	execSet(ctx context.Context, set string) error
	// closeStmts reports whether prepared statements hold client-side resources that must be
	// freed when the connection is destroyed.
	closeStmts() bool
	// serverPrepares reports whether a statement the application prepares for query is prepared
	// on the server connection (and cached, see stmtcache.go). It is false behind a
	// transaction pooler (gate_pooler=transaction), where the next transaction may run on a
	// server connection that never saw the statement, or that has another statement of the same
	// name (see stmt.go).
	serverPrepares(query string) bool
}

// A dialedConn is a driver connection as a connector of gated's own returns it, with what the
// connector learned while connecting (mysqlConnector: the session's id), for the seam's wrap to
// take out. It is kept nowhere else: a connection that pool.dial closes without wrapping it (its
// context ended as it was made) leaves nothing behind. newPhysConn unwraps it.
type dialedConn struct {
	driver.Conn
	info any
}

// innerOptions is what the PostgreSQL drivers' files take from the Config besides the DSN.
type innerOptions struct {
	app    string            // application_name when dsn (or the environment) names none; "" none
	params map[string]string // run-time parameters each connection starts with
	pooled bool              // gate_pooler=transaction: no named statement on the server

	pgxBefore func(context.Context, *pgx.ConnConfig) error // Config.PgxBeforeConnect
	pgxAfter  func(context.Context, *pgx.Conn) error       // Config.PgxAfterConnect
}

// newInner returns the inner driver's connector for dsn, and the function that makes an
// innerConn for each of its connections.
func newInner(name, dsn string, o innerOptions) (driver.Connector, func(driver.Conn, *sockConn) innerConn, error) {
	switch name {
	case "pgx":
		return newPgxInner(dsn, o)
	case "postgres":
		return newPQInner(dsn, o)
	case "mysql":
		return newMySQLInner(name, dsn)
	}
	return newGenericInner(name, dsn)
}

// errPoolerDSN is the error of a DSN whose inner driver would name statements on the server
// behind a transaction pooler.
func errPoolerDSN(need string) error {
	return &DSNError{Key: keyPooler, Err: errors.New("the inner driver would prepare named statements on the server, which a transaction pooler gives to other clients: add " + need + " to the DSN")}
}

// execSimple runs query, without arguments, on dc.
func execSimple(ctx context.Context, dc driver.Conn, query string) error {
	if c, ok := dc.(driver.ExecerContext); ok {
		_, err := c.ExecContext(ctx, query, nil)
		return err
	}
	return errors.New("gated: the inner driver cannot execute statements without preparing them")
}

// beginThenSet begins a transaction with begin and runs set in it, rolling back when set fails.
func beginThenSet(ctx context.Context, dc driver.Conn, opts driver.TxOptions, set string) (driver.Tx, error) {
	b, ok := dc.(driver.ConnBeginTx)
	if !ok {
		return nil, errors.New("gated: the inner driver has no BeginTx")
	}
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := execSimple(ctx, dc, set); err != nil {
		tx.Rollback()
		return nil, err
	}
	return tx, nil
}

// endFailedTxTimeout bounds the ROLLBACK that sendRollback sends.
const endFailedTxTimeout = 5 * time.Second

// sendRollback sends ROLLBACK after a COMMIT or ROLLBACK failed on a driver that does not report
// its transaction status, and reports whether it succeeded. PostgreSQL (and MySQL) answer it
// without error outside a transaction too, so success means the connection is outside one. The
// round trip, on this rare path, lets the connection be reused and so its permit come back before
// Commit returns; a destroyed connection would give it back only later, in the background, and a
// caller retrying at once would find it taken.
func sendRollback(dc driver.Conn, ctx context.Context) bool {
	if ctx.Done() == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, endFailedTxTimeout)
		defer cancel()
	}
	var err error
	switch c := dc.(type) {
	case driver.ExecerContext:
		_, err = c.ExecContext(ctx, "ROLLBACK", nil)
	case driver.Execer: //nolint:staticcheck // legacy drivers, as database/sql supports them
		_, err = c.Exec("ROLLBACK", nil)
	default:
		var st driver.Stmt
		if st, err = dc.Prepare("ROLLBACK"); err == nil {
			_, err = st.Exec(nil) //nolint:staticcheck // legacy drivers
			st.Close()
		}
	}
	return err == nil
}

// staleRefusal reports whether a server error with these fields is the server's refusal of a
// prepared statement itself, before anything of it ran: a cached plan whose result type a
// migration changed (0A000 raised by RevalidateCachedQuery, "cached plan must not change result
// type") or a statement name that no longer exists (26000 raised by FetchPreparedStatement, after
// DISCARD ALL or DEALLOCATE), raised for the top-level statement and not inside a function or
// procedure (no Where context). The class alone proves nothing: 0A000 is feature_not_supported,
// which a procedure raises after its COMMIT as readily. The answer holds for one statement sent
// alone, as every prepared statement is; a simple-protocol string may hold a COMMIT before the
// session's own stale EXECUTE, so the caller of an unprepared query checks oneStatement too.
//
// The routine names are the server's source identifiers, the same in every lc_messages locale;
// a server that sends none (some PostgreSQL-compatible ones) is matched by PostgreSQL's English
// message. The drivers' files read the fields from their error types (innerConn.refusedStale).
func staleRefusal(code, msg, where, routine string) bool {
	if where != "" {
		return false
	}
	switch code {
	case "0A000":
		return routine == "RevalidateCachedQuery" || routine == "" && msg == "cached plan must not change result type"
	case "26000":
		return routine == "FetchPreparedStatement" || routine == "" && strings.HasPrefix(msg, "prepared statement ")
	}
	return false
}

// oneStatement reports whether query is certainly a single SQL statement: it has no semicolon
// but at its end. A statement with one inside a literal or comment is taken for several, which
// only forgoes the stale-statement retry.
func oneStatement(query string) bool {
	return !strings.Contains(strings.TrimRight(query, "; \t\r\n"), ";")
}

// sqlState returns the SQLSTATE of a server error in err's chain (pgconn.PgError and pq.Error
// both have a SQLState method), or "" when the server did not answer with an error.
func sqlState(err error) string {
	var state interface{ SQLState() string }
	if errors.As(err, &state) {
		return state.SQLState()
	}
	return ""
}

// answerLost reports whether err says that the server's answer did not arrive: no SQLSTATE at
// all (the connection failed), a connection exception (class 08), or an operator intervention
// that ended the session (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now,
// 57P04 database_dropped, 57P05 idle_session_timeout). A backend terminated while it waits for
// synchronous replication reports 57P01 after the commit was applied locally, so none of these
// proves that a COMMIT failed.
func answerLost(err error) bool {
	s := sqlState(err)
	return s == "" || strings.HasPrefix(s, "08") || strings.HasPrefix(s, "57P")
}

// A notifyWaiter is an innerConn that can wait, on an idle connection, for a notification of a
// channel the connection listens to (PostgreSQL's LISTEN/NOTIFY): the fleet's lease connection
// (fleet_lease.go, for internal/fleet) uses it to refresh at once when another member joined,
// shrank or left. It is optional: without it (MySQL, any other driver, lib/pq where the platform
// cannot wait on a socket) the fleet refreshes at its regular interval only.
type notifyWaiter interface {
	// waitNotify blocks until a notification whose payload is not self has arrived, ctx has
	// ended, or the connection has failed. It returns nil for a notification, whether it arrived
	// now or during an earlier statement on the connection; ctx's error when ctx ended first,
	// the connection staying usable; errNoNotifyWait at once when it cannot wait here; any other
	// error when the connection is broken. One call at a time, and no other call on the
	// connection meanwhile.
	waitNotify(ctx context.Context, self string) error
}

// errNoNotifyWait is what waitNotify returns when the connection cannot be waited on.
var errNoNotifyWait = errors.New("gated: the connection cannot wait for notifications")
