package gated

import (
	"database/sql/driver"
	"fmt"
)

// A tx wraps the physical transaction to learn when it ended and whether the physical
// connection can be reused. The permits are released afterwards, when database/sql returns the
// virtual connection (IsValid), so Commit's caller gets the result only once they are back.
type tx struct {
	cn    *conn
	inner driver.Tx
}

var _ driver.Tx = (*tx)(nil)

// Commit commits the physical transaction. When the COMMIT may have reached the server and no
// answer came back (see drivers.Conn.CommitUnknown), the error wraps [ErrCommitUnknown]: the
// transaction may or may not have been committed. Its error never wraps driver.ErrBadConn: a
// caller must not take a failed COMMIT for one that never reached the server. Statements of
// application statements closed in the transaction are closed first (a lib/pq COPY ends there).
func (t *tx) Commit() error {
	pc := t.cn.pc
	if pc == nil {
		return t.end(t.inner.Commit())
	}
	pc.sweep(t.cn.c.stmts)
	pc.inner.CheckBeforeWrite()
	// A call of its own, under no context: database/sql gives Commit none, and the context of an
	// earlier statement, ended or not, is none of the COMMIT's business.
	cl := t.cn.startStatement(nil, t.cn.c.obs)
	err := t.inner.Commit()
	cl.finish(err)
	unknown := err != nil && pc.inner.CommitUnknown(err, cl.before)
	err = hideBadConn(t.end(err))
	if unknown {
		err = fmt.Errorf("%w: %w", ErrCommitUnknown, err)
		t.cn.c.obs.commitUnknown(t.cn.g, t.cn.ctx, err)
		return err
	}
	return err
}

// Rollback rolls the physical transaction back, as a call of its own under no context. Its error
// may be driver.ErrBadConn, as the driver's: database/sql does not retry a rollback.
func (t *tx) Rollback() error {
	if pc := t.cn.pc; pc != nil {
		pc.sweep(t.cn.c.stmts)
	}
	cl := t.cn.startStatement(nil, t.cn.c.obs) // none but its event when the binding lost its connection
	err := t.inner.Rollback()
	cl.finish(err)
	return t.end(err)
}

func (t *tx) end(err error) error {
	t.cn.txOpen = false
	if err != nil && t.cn.pc != nil && !t.cn.pc.inner.EndFailedTx() {
		t.cn.pc.broken = true
	}
	return err
}
