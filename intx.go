package gated

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gatedsql/gated/internal/drivers"
)

// TxOptions are the options of [InTx]: the transaction's own, and the opt-in retry of
// serialization failures and deadlocks.
type TxOptions struct {
	sql.TxOptions
	// Retries is how many times InTx runs fn again after it, or the statements it ran, failed
	// with SQLSTATE 40001 (serialization_failure) or 40P01 (deadlock_detected): the server rolled
	// the transaction back and running it again is the documented answer. Each retry begins a
	// new transaction, so it passes the gate again (and may be refused), after a short random
	// pause that grows with each retry and ends with ctx. Zero (the default) never retries.
	// A failed COMMIT is never retried, whatever its SQLSTATE.
	Retries int
}

// retryPause bounds the pause before retry n (1, 2, ...): random in [0, min(2^n ms, 50 ms)],
// so that the transactions that collided do not collide again at once.
func retryPause(n int) time.Duration {
	return rand.N(min(time.Millisecond<<n, 50*time.Millisecond) + 1)
}

// InTx runs fn in a transaction on db and commits it, the way a production transaction helper
// must:
//
//   - The gate is passed before BEGIN: db.BeginTx(ctx) takes the admission and execution
//     permits of ctx's workload ([WithWorkload]) and only then begins, so a refusal
//     ([IsRejected]) costs no round trip. The permits are held until the transaction ends.
//   - When fn returns an error or panics, the transaction is rolled back. fn's error is returned
//     (a panic goes on after the rollback, with every permit back); when the rollback fails too,
//     its error is attached, and errors.Is and errors.As find both.
//   - A failed commit is returned as it is and never retried: when the outcome is unknown (the
//     connection was lost after COMMIT was sent) the error wraps [ErrCommitUnknown], and the
//     caller must find out whether the work was done before doing it again.
//   - With opts.Retries > 0, serialization failures and deadlocks run fn again in a new
//     transaction (see [TxOptions]); fn must then be safe to run more than once.
//
// The gate is not reentrant: fn must use tx, not db. An operation on db inside fn needs a second
// execution permit while fn holds one (a separate transaction), so it waits, or is refused,
// when B is 1; give it B ≥ 2 or another workload. opts may be nil. ctx ends the transaction as
// it does for db.BeginTx: database/sql rolls it back. InTx is safe for concurrent use.
func InTx(ctx context.Context, db *sql.DB, opts *TxOptions, fn func(*sql.Tx) error) error {
	var o TxOptions
	if opts != nil {
		o = *opts
	}
	for attempt := 0; ; attempt++ {
		committing, err := inTxOnce(ctx, db, &o.TxOptions, fn)
		if err == nil || committing || attempt >= o.Retries || !retryable(err) {
			return err
		}
		t := time.NewTimer(retryPause(attempt + 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// inTxOnce runs fn in one transaction; committing is true when the error is the commit's.
func inTxOnce(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(*sql.Tx) error) (committing bool, err error) {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return false, err
	}
	done := false
	defer func() {
		if !done {
			// fn panicked: roll back, which gives the permits back, and let the panic go on.
			tx.Rollback()
		}
	}()
	err = fn(tx)
	done = true
	if err != nil {
		if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
			// sql.ErrTxDone: fn, or database/sql after ctx ended, already ended the transaction.
			return false, &rollbackError{err: err, rollback: rerr}
		}
		return false, err
	}
	return true, tx.Commit()
}

// retryable reports whether err is a failure that a new transaction may not meet again.
func retryable(err error) bool {
	s := drivers.SQLState(err)
	return s == "40001" || s == "40P01"
}

// rollbackError is fn's error with the error of the rollback that followed it.
type rollbackError struct {
	err, rollback error
}

func (e *rollbackError) Error() string {
	return fmt.Sprintf("%v (and gated: rollback failed: %v)", e.err, e.rollback)
}

func (e *rollbackError) Unwrap() []error { return []error{e.err, e.rollback} }
