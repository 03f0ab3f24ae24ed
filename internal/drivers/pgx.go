package drivers

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gatedsql/gated/internal/dsn"
	"github.com/gatedsql/gated/internal/sockconn"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// newPgx returns a connector of the pgx v5 that gated imports, whatever another import
// registered under the name "pgx" (pgx v4 registers that name too), dialing through gated so
// that each connection's socket is a sockconn.Conn, with Config's pgx hooks (pgx_hooks.go).
//
// pgx keeps its default handling of an ended context: it closes the connection in the
// background, sending a cancel request and then reading until the backend hangs up, and gated
// releases the permit when that is done (pgconn.CleanupDone). pgx's alternative, a cancel request
// on a connection that stays in use, is racy: the request can arrive late and cancel the
// connection's next statement, and pgx pads every cancelled call with 100 ms.
func newPgx(source string, o Options) (driver.Connector, Wrap, error) {
	cfg, err := pgx.ParseConfig(source)
	if err != nil {
		return nil, nil, fmt.Errorf("gated: inner driver \"pgx\": %w", dsn.RedactError(err, source))
	}
	if o.App != "" && cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = o.App
	}
	if o.Pooled && cfg.DefaultQueryExecMode != pgx.QueryExecModeExec && cfg.DefaultQueryExecMode != pgx.QueryExecModeSimpleProtocol {
		return nil, nil, errPoolerDSN("default_query_exec_mode=exec (or simple_protocol)")
	}
	for k, v := range o.Params {
		cfg.RuntimeParams[k] = v
	}
	prepares := !o.Pooled
	wrap := func(dc driver.Conn, sock *sockconn.Conn) Conn {
		return &pgxConn{dc: dc, pg: dc.(*stdlib.Conn).Conn().PgConn(), sock: sock, prepares: prepares}
	}
	return stdlib.GetConnector(*cfg, pgxConnectOptions(o)...), wrap, nil
}

// pgxConn knows a pgx connection exactly: pgconn reports whether it is closed, busy or in a
// transaction, and when its asynchronous cleanup has ended.
type pgxConn struct {
	dc   driver.Conn
	pg   *pgconn.PgConn
	sock *sockconn.Conn // nil if pgx dialed without gated (it never does)

	prepares bool // not gate_pooler=transaction: db.Prepare prepares on the server, as pgx does
}

func (c *pgxConn) Alive() bool { return !c.pg.IsClosed() }

func (c *pgxConn) Idle() bool {
	return !c.pg.IsClosed() && !c.pg.IsBusy() && c.pg.TxStatus() == 'I'
}

func (c *pgxConn) TxStatus() byte      { return c.pg.TxStatus() }
func (c *pgxConn) WatchesSocket() bool { return false } // pgx watches its context itself

func (c *pgxConn) Close(bool) {
	c.dc.Close()
	t := time.NewTimer(CleanupWait)
	select {
	case <-c.pg.CleanupDone():
	case <-t.C:
	}
	t.Stop()
}

func (c *pgxConn) Sent() int64 { return sockSent(c.sock) }

func (c *pgxConn) Unsent(err error, before int64) bool {
	if c.sock == nil {
		return false
	}
	return c.sock.Written() == before && c.pg.IsClosed()
}

func (c *pgxConn) CommitUnknown(err error, before int64) bool {
	return c.sock != nil && c.sock.Written() > before && c.pg.IsClosed() && AnswerLost(err)
}

// EndFailedTx: pgx knows its transaction status; a connection left in a transaction is not
// idle and is destroyed.
func (c *pgxConn) EndFailedTx() bool { return c.Idle() }

func (c *pgxConn) CheckBeforeWrite() { armSock(c.sock) }

// CheckEveryReuse: a statement sent to a session the server ended fails with the server's
// error (57P01), as with the plain pgx, whose ResetSession checks a connection at most once a
// second.
func (c *pgxConn) CheckEveryReuse() bool { return false }

func (c *pgxConn) CloseStmts() bool { return false }

// BeginSet begins the transaction on the *pgx.Conn itself, with set in BEGIN's simple-protocol
// query (pgx.TxOptions.BeginQuery): one round trip, as without it. The isolation levels and
// errors are those of pgx's stdlib BeginTx.
func (c *pgxConn) BeginSet(ctx context.Context, opts driver.TxOptions, set string) (driver.Tx, error) {
	if c.pg.IsClosed() {
		return nil, driver.ErrBadConn
	}
	var b strings.Builder
	b.WriteString("begin")
	switch sql.IsolationLevel(opts.Isolation) {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		b.WriteString(" isolation level read uncommitted")
	case sql.LevelReadCommitted:
		b.WriteString(" isolation level read committed")
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		b.WriteString(" isolation level repeatable read")
	case sql.LevelSerializable:
		b.WriteString(" isolation level serializable")
	default:
		return nil, fmt.Errorf("unsupported isolation: %v", opts.Isolation)
	}
	if opts.ReadOnly {
		b.WriteString(" read only")
	}
	b.WriteString("; ")
	b.WriteString(set)
	tx, err := c.dc.(*stdlib.Conn).Conn().BeginTx(ctx, pgx.TxOptions{BeginQuery: b.String()})
	if err != nil {
		return nil, err
	}
	return pgxTx{ctx: ctx, tx: tx}, nil
}

// pgxTx is pgx stdlib's driver.Tx, for transactions gated begins on the *pgx.Conn.
type pgxTx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t pgxTx) Commit() error   { return t.tx.Commit(t.ctx) }
func (t pgxTx) Rollback() error { return t.tx.Rollback(t.ctx) }

// ExecSet sends set in one simple-protocol query.
func (c *pgxConn) ExecSet(ctx context.Context, set string) error {
	_, err := c.pg.Exec(ctx, set).ReadAll()
	return err
}

// ServerPrepares: as pgx's stdlib does, unless behind a transaction pooler (gate_pooler).
func (c *pgxConn) ServerPrepares(string) bool { return c.prepares }

func sockSent(s *sockconn.Conn) int64 {
	if s == nil {
		return -1
	}
	return s.Written()
}

func armSock(s *sockconn.Conn) {
	if s != nil {
		s.CheckBeforeWrite()
	}
}

// StaleStatement: pgx prepares and caches a statement for an unprepared query in its default
// exec mode (cache_statement, the only one that keeps named statements), and drops it from its
// cache when a query on it fails; a refusal of it (RefusedStale) ran nothing. In the other modes
// pgx caches no statement, and a refusal is of the query's own EXECUTE. The Config copy is made
// on this rare path only.
func (c *pgxConn) StaleStatement(err error) bool {
	return c.RefusedStale(err) && c.dc.(*stdlib.Conn).Conn().Config().DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
}

// RefusedStale reads pgconn's error (see staleRefusal).
func (c *pgxConn) RefusedStale(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && staleRefusal(e.Code, e.Message, e.Where, e.Routine)
}

// WaitNotify waits with pgx's own WaitForNotification, which also returns the notifications that
// arrived during earlier statements. An ended context sets a deadline on the socket
// (pgconn.DeadlineContextWatcherHandler), which pgx does not take for a broken connection.
func (c *pgxConn) WaitNotify(ctx context.Context, self string) error {
	conn := c.dc.(*stdlib.Conn).Conn()
	for {
		n, err := conn.WaitForNotification(ctx)
		if n != nil && n.Payload != self {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil && !c.pg.IsClosed() {
				return ctx.Err()
			}
			return err
		}
	}
}
