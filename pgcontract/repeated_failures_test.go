package pgcontract_test

// Thousands of failures of every kind at once: every permit comes back and every attempt is
// counted exactly once.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated"
)

// 1,000 transactions failing with an SQL error, 1,000 refusals and 1,000
// statements cancelled while pg_sleep runs, interleaved across 64 goroutines. Every permit comes
// back and every attempt is counted exactly once. Each attempt is one BeginTx with a context that
// never ends, so an attempt is admitted or refused and never cancelled while it waits; the
// statement context ends 3ms into a one-second pg_sleep inside the admitted transaction.
//
// 64 goroutines share B+Q = 48 admission permits, so some are refused at any time. A refused
// goroutine waits until some admitted transaction has ended before it tries again, which keeps
// refusals near one per completed transaction instead of a busy loop. B is large because a
// cancelled statement keeps its permit until the driver's cancel cleanup is over (a cancel
// request, and a wait for the backend or a new connection), which takes tens of milliseconds.
func TestRepeatedFailuresReturnEveryPermitAndCountersAddUp(t *testing.T) {
	runPG(t, "gate_max_conns=32&gate_concurrent=32&gate_queue=16&gate_queue_wait=10s", func(t *testing.T, e *pgEnv) {
		const goroutines, target = 64, 1000
		db, c, adm, drv := e.db, e.c, e.adm, e.drv
		table := pgTable(t, adm, "id int primary key")
		if _, err := adm.Exec("INSERT INTO " + table + " VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		before := c.Stats()

		var attempts, admitted, refused, sqlErrors, cancelled, cancelledEarly, missed, canceledByServer atomic.Int64
		done := make(chan struct{}) // closed when every target is reached, or on an unexpected error
		var finish sync.Once
		stop := func() { finish.Do(func() { close(done) }) }
		reached := func() bool {
			if sqlErrors.Load() >= target && cancelled.Load() >= target && refused.Load() >= target {
				stop()
			}
			select {
			case <-done:
				return true
			default:
				return false
			}
		}
		ended := make(chan struct{}, goroutines) // one token per admitted transaction that ended

		sqlError := func(tx *sql.Tx) {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1)")
			if code := driverSQLState(drv, err); code != "23505" {
				t.Errorf("duplicate insert: got %v (SQLSTATE %q), want unique_violation 23505", err, code)
				return
			}
			sqlErrors.Add(1)
		}
		cancelMidQuery := func(tx *sql.Tx) {
			sctx, cancel := context.WithTimeout(ctx, 3*time.Millisecond)
			defer cancel()
			_, err := tx.ExecContext(sctx, "SELECT pg_sleep(1)")
			switch code := driverSQLState(drv, err); {
			case err == nil:
				missed.Add(1) // the cancel reached the server before the statement; it ran to the end
			case code == "57014" || errors.Is(err, context.DeadlineExceeded):
				cancelled.Add(1)
				if code == "57014" {
					canceledByServer.Add(1)
				}
			case errors.Is(err, driver.ErrBadConn):
				// The context ended before the statement was sent: pgx reports its
				// contextAlreadyDoneError as driver.ErrBadConn, lib/pq the connection it marked
				// bad when the context ended. Not a mid-query cancel, so not counted as one.
				cancelledEarly.Add(1)
			default:
				t.Errorf("statement cancelled mid-query: %v", err)
			}
		}

		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := 0; !reached(); i++ {
					attempts.Add(1)
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						if !gated.IsRejected(err) {
							t.Errorf("BeginTx: %v", err)
							stop() // nobody may be left waiting for an ended transaction
							return
						}
						refused.Add(1)
						select {
						case <-ended:
						case <-done:
						}
						continue
					}
					admitted.Add(1)
					// Alternate while both kinds are short of the target, then do the one still short.
					if cancelled.Load() >= target || (sqlErrors.Load() < target && (g+i)%2 == 0) {
						sqlError(tx)
					} else {
						cancelMidQuery(tx)
					}
					tx.Rollback() // after a cancel lib/pq has closed the connection: an error here is expected
					select {
					case ended <- struct{}{}:
					default:
					}
				}
			})
		}
		finished := make(chan struct{})
		go func() {
			wg.Wait()
			close(finished)
		}()
		select {
		case <-finished:
		case <-time.After(3 * time.Minute):
			stop()
			t.Fatalf("the workload stalled: %+v", c.Stats())
		}

		waitIdle(t, c)
		s := c.Stats()
		t.Logf("%d attempts: %d admitted (%d SQL errors; %d cancelled mid-query, %d of them with 57014; %d contexts ended before the statement was sent; %d cancels the server ignored), %d refused; gate: %+v",
			attempts.Load(), admitted.Load(), sqlErrors.Load(), cancelled.Load(), canceledByServer.Load(), cancelledEarly.Load(), missed.Load(), refused.Load(), s)
		if got, want := s.Admitted-before.Admitted, admitted.Load(); got != want {
			t.Errorf("Admitted grew by %d, want %d", got, want)
		}
		if got, want := (s.RejectedFull+s.RejectedTimeout)-(before.RejectedFull+before.RejectedTimeout), refused.Load(); got != want {
			t.Errorf("RejectedFull+RejectedTimeout grew by %d, want %d", got, want)
		}
		if got := s.Canceled - before.Canceled; got != 0 {
			t.Errorf("Canceled grew by %d; no attempt had a context that could end", got)
		}
		if got, want := gateAttempts(c)-(before.Admitted+before.RejectedFull+before.RejectedTimeout+before.Canceled), attempts.Load(); got != want {
			t.Errorf("Admitted + RejectedFull + RejectedTimeout + Canceled grew by %d for %d attempts", got, want)
		}
	})
}
