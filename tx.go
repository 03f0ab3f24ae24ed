package gated

import (
	"database/sql/driver"
	"errors"
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

// Commit commits the physical transaction. When the connection died after the COMMIT was sent
// and before the server answered, the error wraps [ErrCommitUnknown]: the commit may have been
// applied.
func (t *tx) Commit() error {
	pc := t.cn.pc
	sent := pc != nil && pc.alive() // a connection already dead cannot have sent the COMMIT
	start := t.cn.c.obs.now()
	err := t.end(t.inner.Commit())
	t.cn.c.obs.statement(t.cn.g, start, nil, err)
	if err != nil && sent && commitOutcomeUnknown(err, pc) {
		err = fmt.Errorf("%w: %w", ErrCommitUnknown, err)
		t.cn.c.obs.commitUnknown(t.cn.g, err)
		return err
	}
	return err
}

// Rollback rolls the physical transaction back.
func (t *tx) Rollback() error {
	start := t.cn.c.obs.now()
	err := t.end(t.inner.Rollback())
	t.cn.c.obs.statement(t.cn.g, start, nil, err)
	return err
}

func (t *tx) end(err error) error {
	t.cn.txOpen = false
	if err != nil && t.cn.pc != nil && t.cn.pc.pg == nil && !t.cn.pc.endTx() {
		t.cn.pc.broken = true
	}
	return err
}

// commitOutcomeUnknown reports whether a COMMIT that failed with err may still have been applied:
// the connection is gone, the server did not answer (no SQLSTATE), and the driver did not say
// that nothing was sent (driver.ErrBadConn, or pgconn's SafeToRetry).
func commitOutcomeUnknown(err error, pc *physConn) bool {
	var safe interface{ SafeToRetry() bool }
	return !pc.alive() && sqlState(err) == "" && !errors.Is(err, driver.ErrBadConn) &&
		!(errors.As(err, &safe) && safe.SafeToRetry())
}
