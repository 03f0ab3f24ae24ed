package gated

import (
	"context"
	"database/sql/driver"
)

// A stmt is the virtual statement returned by a virtual connection. database/sql caches it and
// calls it directly later, possibly in another binding; returning the physical statement instead
// would bypass the gate and could put two goroutines on one physical connection. Each use binds
// through the virtual connection and runs on the bound physical connection's own prepared
// statement for the same query (see physConn.prepare).
type stmt struct {
	cn       *conn
	query    string
	numInput int
}

var (
	_ driver.Stmt             = (*stmt)(nil)
	_ driver.StmtExecContext  = (*stmt)(nil)
	_ driver.StmtQueryContext = (*stmt)(nil)
)

// Close does nothing: the physical statements belong to their physical connections and are
// closed with them or evicted from their cache. It must not block, because database/sql may call
// it while holding its own locks.
func (s *stmt) Close() error { return nil }

// NumInput is what the physical statement reported when the query was prepared.
func (s *stmt) NumInput() int { return s.numInput }

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	var res driver.Result
	err := s.cn.run(ctx, false, func(pc *physConn) error {
		st, err := pc.prepare(ctx, s.query)
		if err != nil {
			return err
		}
		res, err = pc.execStmt(ctx, st, args)
		return err
	})
	return res, err
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	var rows driver.Rows
	err := s.cn.run(ctx, false, func(pc *physConn) error {
		st, err := pc.prepare(ctx, s.query)
		if err != nil {
			return err
		}
		rows, err = pc.queryStmt(ctx, st, args)
		return err
	})
	return rows, err
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
