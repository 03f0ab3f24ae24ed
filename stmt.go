package gated

import (
	"context"
	"database/sql/driver"
)

// A stmt is the virtual statement returned by a virtual connection. database/sql caches it and
// calls it directly later, possibly in another binding; returning the physical statement instead
// would bypass the gate and could put two goroutines on one physical connection. Each use binds
// through the virtual connection and runs on the bound physical connection's own prepared copy
// of the statement (see stmtcache.go).
//
// Unless the inner DSN asks for no named statements (pgx's default_query_exec_mode other than
// cache_statement, lib/pq's binary_parameters=yes): then each use runs the query text as an
// unprepared query, as the driver runs any other. Behind a transaction-pooling PgBouncer a
// copy prepared in one transaction is on a server connection the next may not get, and
// another client's statement of the same name (pgx names them by query text, lib/pq by a
// counter) may be there instead: the server refuses it (26000, 42P05) or, with lib/pq, runs
// the wrong statement.
type stmt struct {
	cn       *conn
	share    *stmtShare
	numInput int
	closed   bool
}

var (
	_ driver.Stmt             = (*stmt)(nil)
	_ driver.StmtExecContext  = (*stmt)(nil)
	_ driver.StmtQueryContext = (*stmt)(nil)
)

// Close tells the physical connections that this statement no longer needs their copies; each
// closes its copy before its next operation. It never blocks on I/O, because database/sql may
// call it while holding its own locks.
func (s *stmt) Close() error {
	if !s.closed {
		s.closed = true
		s.cn.c.stmts.release(s.share)
	}
	return nil
}

// NumInput is what the physical statement reported when the query was prepared.
func (s *stmt) NumInput() int { return s.numInput }

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	var res driver.Result
	err := s.cn.run(ctx, false, func(pc *physConn) (err error) {
		if err := s.cn.limitSession(ctx, pc); err != nil {
			return err
		}
		if !pc.inner.ServerPrepares(s.share.query) {
			res, err = pc.exec(ctx, s.share.query, args)
			return err
		}
		return s.onCopy(ctx, pc, func(st driver.Stmt) (err error) {
			res, err = pc.execStmt(ctx, st, args)
			return err
		})
	})
	return res, err
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	var rows driver.Rows
	err := s.cn.runAs(ctx, opRows, func(pc *physConn) (err error) {
		if err := s.cn.limitSession(ctx, pc); err != nil {
			return err
		}
		if !pc.inner.ServerPrepares(s.share.query) {
			rows, err = pc.query(ctx, s.share.query, args)
			return err
		}
		return s.onCopy(ctx, pc, func(st driver.Stmt) (err error) {
			rows, err = pc.queryStmt(ctx, st, args)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return s.cn.rowsOf(rows), nil
}

// onCopy runs use on pc's copy of the statement. A copy the server rejects as stale is evicted
// and, when nothing else ran in the binding (so no transaction was aborted by the failure), the
// statement is prepared again and run once more: the server ran nothing of it.
func (s *stmt) onCopy(ctx context.Context, pc *physConn, use func(driver.Stmt) error) error {
	defer s.cn.c.timeouts.noteSessionChange(pc, s.share.query)
	for retried := false; ; retried = true {
		st, err := pc.stmtFor(ctx, s.share)
		if err == nil {
			err = use(st)
		}
		if err == nil || !pc.evictStale(err, s.share) || retried || !s.cn.fresh {
			return err
		}
	}
}

// Exec is never called by database/sql, which prefers ExecContext.
func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), valuesToNamed(args))
}

// Query is never called by database/sql, which prefers QueryContext.
func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), valuesToNamed(args))
}

func valuesToNamed(args []driver.Value) []driver.NamedValue {
	named := make([]driver.NamedValue, len(args))
	for i, v := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return named
}
