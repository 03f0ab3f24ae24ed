package drivers

import (
	"context"
	"database/sql/driver"
	"errors"
	"time"
)

// The statements this package runs itself on a driver's connection, through database/sql's
// driver interfaces: SET and SET LOCAL for the drivers that cannot send them otherwise, the
// ROLLBACK after a failed COMMIT, and the MySQL connector's and killer's queries.

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

// execOn runs query, without arguments, on dc as database/sql would: directly when the driver can
// (driver.ExecerContext, or its legacy Execer), else through a statement prepared for this one use.
func execOn(ctx context.Context, dc driver.Conn, query string) error {
	var err error
	switch c := dc.(type) {
	case driver.ExecerContext:
		if _, err = c.ExecContext(ctx, query, nil); err != driver.ErrSkip {
			return err
		}
	case driver.Execer: //nolint:staticcheck // legacy drivers, as database/sql supports them
		if err = ctx.Err(); err != nil {
			return err
		}
		if _, err = c.Exec(query, nil); err != driver.ErrSkip {
			return err
		}
	}
	st, err := prepareOn(ctx, dc, query)
	if err != nil {
		return err
	}
	defer st.Close()
	if s, ok := st.(driver.StmtExecContext); ok {
		_, err = s.ExecContext(ctx, nil)
		return err
	}
	if err = ctx.Err(); err != nil {
		return err
	}
	_, err = st.Exec(nil) //nolint:staticcheck // fallback for drivers without StmtExecContext
	return err
}

// queryOn runs query, without arguments, on dc as database/sql would: directly when the driver
// can (driver.QueryerContext, or its legacy Queryer), else through a statement prepared for this
// one use, closed with the rows.
func queryOn(ctx context.Context, dc driver.Conn, query string) (driver.Rows, error) {
	switch c := dc.(type) {
	case driver.QueryerContext:
		if r, err := c.QueryContext(ctx, query, nil); err != driver.ErrSkip {
			return r, err
		}
	case driver.Queryer: //nolint:staticcheck // legacy drivers, as database/sql supports them
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if r, err := c.Query(query, nil); err != driver.ErrSkip {
			return r, err
		}
	}
	st, err := prepareOn(ctx, dc, query)
	if err != nil {
		return nil, err
	}
	var r driver.Rows
	if s, ok := st.(driver.StmtQueryContext); ok {
		r, err = s.QueryContext(ctx, nil)
	} else if err = ctx.Err(); err == nil {
		r, err = st.Query(nil) //nolint:staticcheck // fallback for drivers without StmtQueryContext
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	return stmtRows{r, st}, nil
}

// stmtRows are the rows of a statement prepared for them alone: closing them closes it.
type stmtRows struct {
	driver.Rows
	st driver.Stmt
}

func (r stmtRows) Close() error {
	err := r.Rows.Close()
	if serr := r.st.Close(); err == nil {
		err = serr
	}
	return err
}

// prepareOn prepares query on dc, as database/sql's ctxDriverPrepare.
func prepareOn(ctx context.Context, dc driver.Conn, query string) (driver.Stmt, error) {
	if c, ok := dc.(driver.ConnPrepareContext); ok {
		return c.PrepareContext(ctx, query)
	}
	st, err := dc.Prepare(query)
	if err == nil && ctx.Err() != nil {
		st.Close()
		return nil, ctx.Err()
	}
	return st, err
}
