// Package drivers is gated's seam to the inner drivers: everything gated knows about a particular
// driver sits behind a Conn, one file per driver: pgx.go and pgx_hooks.go (pgx v5), pq.go (lib/pq),
// mysql.go (go-sql-driver/mysql, registered by the application's import) and generic.go (any other
// registered driver, with only what database/sql itself promises). New chooses among them by the
// driver's name (gate_driver) and returns the driver's connector and the Wrap that makes a Conn of
// each connection it opens.
//
// It owns everything driver-specific: it is the only package of gated that uses pgx (the root
// imports it only for the types of Config's hooks) and lib/pq, whose imports here register the
// drivers "pgx" and "postgres", and the only one that knows MySQL's sessions and how to stop their
// statements. It answers questions about one connection (is it alive, idle, in a transaction;
// did a failed call send anything; may a failed COMMIT have been applied) and classifies the
// servers' errors (SQLState, AnswerLost). It never touches permits, the pool, the gate or the
// bookkeeping of sessions: the root package decides what an answer means (a replay, a destroy,
// ErrCommitUnknown). It knows nothing of the root package; gated's settings reach it as Options.
package drivers

import (
	"context"
	"database/sql/driver"
	"errors"
	"time"

	"github.com/gatedsql/gated/internal/sockconn"
	"github.com/jackc/pgx/v5"
)

// CleanupWait bounds how long a destroyed connection may keep its permit while the driver
// finishes its asynchronous cleanup (pgx closes a cancelled connection in the background, a
// lib/pq socket drains, a MySQL statement is killed): Conn.Close returns after it at the latest.
const CleanupWait = 15 * time.Second

// A Conn is gated's knowledge of one physical connection of the inner driver.
type Conn interface {
	// Alive reports whether the driver still considers the connection open; true when it
	// cannot tell.
	Alive() bool
	// Idle reports whether the connection may serve another operation: alive, not busy, and
	// idle on the server (TxStatus 'I'); for a driver that cannot report its transaction
	// status ('?'), alive, as database/sql itself judges a connection.
	Idle() bool
	// TxStatus returns the connection's transaction status as the server last reported it
	// (PostgreSQL's ReadyForQuery: 'I' idle, 'T' in a transaction, 'E' in a failed one), or
	// '?' when the driver does not report it.
	TxStatus() byte
	// WatchesSocket reports whether the driver cannot interrupt its socket's blocking calls when
	// a context ends (lib/pq): each call then watches its context (the root's call.go, with
	// sockconn.Watch).
	WatchesSocket() bool
	// Close closes the connection and returns once the driver's cleanup has ended (pgx's
	// asynchronous cancel and close, the drain of a lib/pq socket whose statement may still
	// run, the kill of a MySQL statement when mayRun), waiting at most CleanupWait. mayRun
	// says that a call ended with its context ended and the connection given up by the driver,
	// so the server may still run its statement. Statements prepared on it are not closed
	// first: the server frees them with the session, and a round trip each could block for as
	// long as a network partition lasts.
	Close(mayRun bool)
	// Sent returns how many bytes the connection has written to its socket so far, or -1 when
	// gated does not see the socket.
	Sent() int64
	// Unsent reports whether an operation that failed with err, on a connection that had sent
	// before bytes when it began, certainly sent nothing to the server: only then may it run
	// again on another connection.
	Unsent(err error, before int64) bool
	// CommitUnknown reports whether a COMMIT that failed with err, begun when the connection
	// had sent before bytes, may have been applied.
	CommitUnknown(err error, before int64) bool
	// EndFailedTx is called after a COMMIT or ROLLBACK failed. It ends whatever transaction may
	// still be open and reports whether the connection is now known to be outside one, and so
	// reusable.
	EndFailedTx() bool
	// CheckBeforeWrite makes the next write first check that the server has not hung up or
	// sent something unasked, and fail without sending anything if it has. It is called before
	// a used connection serves another operation, and before COMMIT: a connection that died
	// before the statement was sent must be told from one lost after.
	CheckBeforeWrite()
	// CheckEveryReuse reports whether a used connection must be checked before every operation,
	// however short its rest (the root skips the check on a connection reused within a
	// millisecond): true where a statement sent to a session the server has ended fails with
	// an error the plain driver makes database/sql run again (lib/pq reports it as
	// driver.ErrBadConn), so that skipping the check would fail a call the plain driver serves.
	CheckEveryReuse() bool
	// StaleStatement reports whether err says that a statement the driver itself prepared and
	// cached for an unprepared query is no longer valid on the server (pgx caches statements per
	// connection; a migration or DISCARD ALL invalidates them), so that the server ran nothing
	// and the driver has dropped its cache entry: the query may run once more.
	StaleStatement(err error) bool
	// RefusedStale reports whether err is the server's refusal of a prepared statement itself,
	// before anything of it ran (staleRefusal); false for drivers whose errors gated cannot read.
	RefusedStale(err error) bool
	// BeginSet begins a transaction whose first statements are set (SET LOCAL ...): pgx sends
	// them in BEGIN's round trip. On failure no transaction is open, or the connection is not
	// idle and gets destroyed.
	BeginSet(ctx context.Context, opts driver.TxOptions, set string) (driver.Tx, error)
	// ExecSet runs set (SET or RESET statements) outside a transaction.
	ExecSet(ctx context.Context, set string) error
	// CloseStmts reports whether prepared statements hold client-side resources that must be
	// freed when the connection is destroyed.
	CloseStmts() bool
	// ServerPrepares reports whether a statement the application prepares for query is prepared
	// on the server connection (and cached: the root's stmtcache.go). It is false behind a
	// transaction pooler (gate_pooler=transaction), where the next transaction may run on a
	// server connection that never saw the statement, or that has another statement of the same
	// name (the root's stmt.go).
	ServerPrepares(query string) bool
}

// A Wrap makes the Conn of a connection that the connector New returned opened; sock is the socket
// gated dialed for it (pgx, lib/pq), nil when gated did not dial it.
type Wrap func(dc driver.Conn, sock *sockconn.Conn) Conn

// A dialed is a driver connection as a connector of this package returns it, with what the
// connector learned while connecting (mysqlConnector: the session's id), for the Wrap to take
// out. It is kept nowhere else: a connection that the pool closes without wrapping it (its
// context ended as it was made) leaves nothing behind.
type dialed struct {
	driver.Conn
	info any
}

// Unwrap returns the driver's own connection of dc, a connection that New's connector opened, for
// the driver calls that do not go through Conn. It is dc itself unless this package wrapped it.
func Unwrap(dc driver.Conn) driver.Conn {
	if d, ok := dc.(*dialed); ok {
		return d.Conn
	}
	return dc
}

// Options is what the PostgreSQL drivers' files take from gated's Config besides the DSN.
type Options struct {
	App    string            // application_name when the DSN (or the environment) names none; "" none
	Params map[string]string // run-time parameters each connection starts with
	Pooled bool              // gate_pooler=transaction: no named statement on the server

	PgxBefore func(context.Context, *pgx.ConnConfig) error // Config.PgxBeforeConnect
	PgxAfter  func(context.Context, *pgx.Conn) error       // Config.PgxAfterConnect
}

// New returns the connector of the inner driver registered as name, for the DSN source, and the
// Wrap that makes a Conn of each of its connections. A setting of gated's that does not fit the
// driver is reported as a *SettingError; the driver's own errors are returned with source's
// passwords removed.
func New(name, source string, o Options) (driver.Connector, Wrap, error) {
	switch name {
	case "pgx":
		return newPgx(source, o)
	case "postgres":
		return newPQ(source, o)
	case "mysql":
		return newMySQL(name, source)
	}
	return newGeneric(name, source)
}

// A Setting names one of gated's settings that a SettingError is about.
type Setting int

const (
	SettingDriver Setting = iota // the inner driver's name (gate_driver)
	SettingPooler                // the transaction pooler (gate_pooler)
)

// A SettingError is New's error about one of gated's own settings rather than the driver's DSN:
// the driver named is not registered, or its DSN would name statements on the server behind a
// transaction pooler. The root package reports it as the DSN error of that setting's key. Its
// message holds no value of the DSN.
type SettingError struct {
	Setting Setting
	Err     error
}

func (e *SettingError) Error() string { return e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// errPoolerDSN is the error of a DSN whose inner driver would name statements on the server
// behind a transaction pooler.
func errPoolerDSN(need string) error {
	return &SettingError{Setting: SettingPooler, Err: errors.New("the inner driver would prepare named statements on the server, which a transaction pooler gives to other clients: add " + need + " to the DSN")}
}
