package gated

// The bulkhead contract, first half (issue 3): how a permit lives and ends — commit and rollback,
// overload, waits that end, and work that goes on after the caller gave up — checked against a
// real PostgreSQL with every inner driver. Each case ends with checkQuiet (I7).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Commit and rollback

// Condition 1. A Commit the server refuses, or that ends an aborted transaction, returns a
// result too, so it is held to the same rule as a successful one.
func TestContractCommitReturnsAfterPermitsAreBack(t *testing.T) {
	cases := []struct {
		name string
		work func(ctx context.Context, tx *sql.Tx, table string, i int) error // before Commit
		want func(commitErr error) bool                                       // Commit's result
	}{{
		name: "committed",
		work: func(ctx context.Context, tx *sql.Tx, table string, i int) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES ($1)", i)
			return err
		},
		want: func(err error) bool { return err == nil },
	}, {
		// The deferred unique constraint is checked at COMMIT, which fails (23505) and ends the
		// transaction on a connection that stays healthy.
		name: "refused by the server",
		work: func(ctx context.Context, tx *sql.Tx, table string, i int) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES ($1), ($1)", i)
			return err
		},
		want: func(err error) bool {
			var state interface{ SQLState() string }
			return errors.As(err, &state) && state.SQLState() == "23505"
		},
	}, {
		// The server answers ROLLBACK; the drivers report an error (pgx ErrTxCommitRollback,
		// lib/pq ErrInFailedTransaction) on a connection that stays healthy.
		name: "aborted by an SQL error",
		work: func(ctx context.Context, tx *sql.Tx, table string, i int) error {
			if _, err := tx.ExecContext(ctx, "SELECT 1/0"); err == nil {
				return errors.New("SELECT 1/0 succeeded")
			}
			return nil
		},
		want: func(err error) bool { return err != nil },
	}}
	forEachDriver(t, func(t *testing.T, drv string) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				withPG(t, "", drv, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
					db, c, adm := e.db, e.c, e.adm
					table := pgTable(t, adm, "id int, UNIQUE (id) DEFERRABLE INITIALLY DEFERRED")
					ctx := context.Background()
					for i := range 10 {
						tx := mustBegin(t, db)
						if err := tc.work(ctx, tx, table, i); err != nil {
							t.Fatal(err)
						}
						err := tx.Commit()
						// The moment Commit returned, its permit must be back: a B=1, Q=0 gate, which
						// refuses at once whatever finds the permit taken, admits the next transaction.
						if s := c.Stats(); s.Running != 0 || s.Pool.InUse != 0 {
							t.Fatalf("Commit returned (%v) with Running = %d, Pool.InUse = %d; want both 0", err, s.Running, s.Pool.InUse)
						}
						next, nextErr := db.BeginTx(ctx, nil)
						if nextErr != nil {
							t.Fatalf("a new transaction right after Commit returned: %v", nextErr)
						}
						if err := next.Rollback(); err != nil {
							t.Fatal(err)
						}
						if !tc.want(err) {
							t.Fatalf("Commit: unexpected result %v", err)
						}
						// The commit had finished: another session sees its row, or nothing.
						var n int
						if err := adm.QueryRow("SELECT count(*) FROM "+table+" WHERE id = $1", i).Scan(&n); err != nil {
							t.Fatal(err)
						}
						want := 0
						if err == nil {
							want = 1
						}
						if n != want {
							t.Fatalf("right after Commit returned %v, another session sees %d rows with id %d, want %d", err, n, i, want)
						}
					}
				})
			})
		}
	})
}

// Condition 2.
func TestContractRollbackAfterSQLErrorReleasesPermits(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c, adm := e.db, e.c, e.adm
		table := pgTable(t, adm, "id int PRIMARY KEY")
		ctx := context.Background()
		for _, stmt := range []string{
			"SELECT 1/0", // 22012
			"INSERT INTO " + table + " VALUES (1), (1)",  // 23505
			"SELECT * FROM gated_contract_no_such_table", // 42P01
		} {
			tx := mustBegin(t, db)
			if _, err := tx.ExecContext(ctx, stmt); err == nil {
				t.Fatalf("%q succeeded", stmt)
			}
			// The transaction is aborted: the next statement fails too (25P02).
			if _, err := tx.ExecContext(ctx, "SELECT 1"); err == nil {
				t.Fatalf("a statement after %q succeeded in an aborted transaction", stmt)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatalf("Rollback after %q: %v", stmt, err)
			}
			if s := c.Stats(); s.Running != 0 || s.Pool.InUse != 0 {
				t.Fatalf("after %q and Rollback: Running = %d, Pool.InUse = %d; want both 0", stmt, s.Running, s.Pool.InUse)
			}
			// B=1, Q=0: only a returned permit lets the next transaction in.
			next, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatalf("a new transaction right after Rollback: %v", err)
			}
			if err := next.Rollback(); err != nil {
				t.Fatal(err)
			}
		}
		// An SQL error does not make the connection unusable: rolled back, it was reused.
		if s := c.Stats(); s.Pool.Opened != 1 || s.Pool.Closed != 0 {
			t.Errorf("rolled-back connections were discarded: opened %d, closed %d; want 1, 0", s.Pool.Opened, s.Pool.Closed)
		}
	})
}

// Condition 3.
func TestContractRollbackOnTerminatedBackendFailsAndDiscardsTheConnection(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c, adm := e.db, e.c, e.adm
		h := hold(t, db)
		before := c.Stats()
		var killed bool
		// With a timeout, pg_terminate_backend returns once the backend has exited.
		if err := adm.QueryRow("SELECT pg_terminate_backend($1, 10000)", h.pid).Scan(&killed); err != nil || !killed {
			t.Fatalf("pg_terminate_backend(%d): %v, %v", h.pid, killed, err)
		}
		err := h.tx.Rollback()
		if err == nil {
			t.Fatal("Rollback on a terminated backend returned nil")
		}
		if isGateError(err) {
			t.Errorf("Rollback: got the gate's error %v, want the driver's", err)
		}
		t.Logf("Rollback: %v", err)

		waitFor(t, "the permit back", func() bool {
			s := c.Stats()
			return s.Running == 0 && s.Pool.InUse == 0
		})
		s := c.Stats()
		if s.Pool.Closed != before.Pool.Closed+1 || s.Pool.Open != 0 || s.Pool.Idle != 0 {
			t.Errorf("the broken connection was not discarded: pool before %+v, after %+v", before.Pool, s.Pool)
		}
		var pid int
		if err := db.QueryRow("SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatalf("the next operation: %v", err)
		}
		if pid == h.pid {
			t.Errorf("the next operation ran on the terminated backend %d", pid)
		}
		if s := c.Stats(); s.Pool.Opened != before.Pool.Opened+1 || s.Pool.Closed != before.Pool.Closed+1 {
			t.Errorf("the next operation did not run on one new connection: pool before %+v, after %+v", before.Pool, s.Pool)
		}
	})
}

// Condition 4.
func TestContractRowsHoldPermitsUntilClosedOrExhausted(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c := e.db, e.c
		ctx := context.Background()
		held := func(what string) {
			t.Helper()
			if s := c.Stats(); s.Running != 1 {
				t.Fatalf("%s: Running = %d, want 1", what, s.Running)
			}
			checkGateRefusal(t, what+": another operation", db.PingContext(ctx), ErrAdmissionFull)
		}
		released := func(what string) {
			t.Helper()
			if s := c.Stats(); s.Running != 0 || s.Pool.InUse != 0 {
				t.Fatalf("%s: Running = %d, Pool.InUse = %d; want both 0", what, s.Running, s.Pool.InUse)
			}
			if err := db.PingContext(ctx); err != nil {
				t.Fatalf("%s: the next operation: %v", what, err)
			}
		}

		// Closed before the end.
		rows, err := db.QueryContext(ctx, "SELECT g FROM generate_series(1, 10000) g")
		if err != nil {
			t.Fatal(err)
		}
		if !rows.Next() {
			t.Fatalf("no first row: %v", rows.Err())
		}
		held("one row read of 10000")
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		released("after rows.Close")

		// Read to the end, without Close.
		rows, err = db.QueryContext(ctx, "SELECT g FROM generate_series(1, 3) g")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if !rows.Next() {
				t.Fatalf("row %d missing: %v", i+1, rows.Err())
			}
			held(fmt.Sprintf("row %d of 3 read", i+1))
		}
		if rows.Next() {
			t.Fatal("a fourth row")
		}
		released("after Next returned false")
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()

		// Ended by an error in the middle of the result.
		rows, err = db.QueryContext(ctx, "SELECT 1 / (3 - g) FROM generate_series(1, 5) g")
		if err == nil {
			for rows.Next() {
			}
			err = rows.Err()
			released("after Next stopped at an error")
			rows.Close()
		} else {
			released("after Query failed")
		}
		if err == nil {
			t.Error("division by zero in the third row: no error")
		}

		// QueryRow().Scan.
		var v int
		if err := db.QueryRowContext(ctx, "SELECT 42").Scan(&v); err != nil || v != 42 {
			t.Fatalf("QueryRow: %d, %v", v, err)
		}
		released("after QueryRow().Scan")
	})
}

// Overload

// Condition 5.
func TestContractAdmissionFullRefusesAtOnceWithoutServerRoundTrip(t *testing.T) {
	const refusals = 350 // 50 of each kind of operation
	// P = B: every physical connection the gate may open is open and in a held transaction, so a
	// refusal that talked to the server would have to open a new one or touch a held one.
	runPG(t, "gate_max_conns=2&gate_concurrent=2&gate_queue=2&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		db, c, app, adm := e.db, e.c, e.app, e.adm
		h1, h2 := hold(t, db), hold(t, db)
		w1 := beginQueued(t, db, c, context.Background())
		w2 := beginQueued(t, db, c, context.Background())

		before := c.Stats()
		serverBefore := appActivity(t, adm, app)
		ctx := context.Background()
		durations := make([]time.Duration, 0, refusals)
		for i := range refusals {
			op := gateOps[i%len(gateOps)]
			start := time.Now()
			err := op.run(ctx, db)
			durations = append(durations, time.Since(start))
			checkGateRefusal(t, op.name, err, ErrAdmissionFull)
		}
		after := c.Stats()
		serverAfter := appActivity(t, adm, app)

		med := medianDuration(durations)
		t.Logf("%d refusals: median %v, 90th percentile %v, max %v", refusals, med, durations[len(durations)*9/10], durations[len(durations)-1])
		if med >= 5*time.Millisecond {
			t.Errorf("median refusal took %v; a refusal must not wait for anything", med)
		}
		if after.RejectedFull != before.RejectedFull+refusals {
			t.Errorf("RejectedFull grew by %d for %d refusals", after.RejectedFull-before.RejectedFull, refusals)
		}
		if after.Running != 2 || after.Waiting != 2 || after.Admitted != before.Admitted {
			t.Errorf("refusals changed the gate: before %+v, after %+v", before, after)
		}
		if after.Pool != before.Pool {
			t.Errorf("refusals touched the physical pool: before %+v, after %+v", before.Pool, after.Pool)
		}
		if serverAfter != serverBefore {
			t.Errorf("refusals reached the server:\nbefore:\n%s\nafter:\n%s", serverBefore, serverAfter)
		}

		h1.commit(t)
		h2.commit(t)
		for _, w := range []<-chan txResult{w1, w2} {
			r := <-w
			if r.err != nil {
				t.Fatalf("queued transaction: %v", r.err)
			}
			r.tx.Commit()
		}
	})
}

// Condition 6.
func TestContractSecondTransactionRefusedWhileFirstHoldsThePermit(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c, adm := e.db, e.c, e.adm
		table := pgTable(t, adm, "id int PRIMARY KEY")
		ctx := context.Background()

		first := mustBegin(t, db)
		if _, err := first.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		_, err := db.BeginTx(ctx, nil)
		checkGateRefusal(t, "second transaction while the first holds the only permit", err, ErrAdmissionFull)
		if s := c.Stats(); s.RejectedFull != 1 || s.Running != 1 || s.Waiting != 0 {
			t.Errorf("after the refusal: %+v", s)
		}
		if err := first.Commit(); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.Concurrent-s.Running != 1 {
			t.Errorf("after the first committed, %d of B=%d permits are available, want 1", s.Concurrent-s.Running, s.Concurrent)
		}
		second := mustBegin(t, db)
		if _, err := second.ExecContext(ctx, "INSERT INTO "+table+" VALUES (2)"); err != nil {
			t.Fatal(err)
		}
		if err := second.Commit(); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := adm.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil || n != 2 {
			t.Errorf("table has %d rows (%v), want both transactions' rows", n, err)
		}
	})
}

// Condition 7.
func TestContractRefusalIsCountedOnceAndNotRetried(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c := e.db, e.c
		ctx := context.Background()
		stmt, err := db.PrepareContext(ctx, "SELECT 1") // prepared while the permit is free
		if err != nil {
			t.Fatal(err)
		}
		defer stmt.Close()
		ops := append(slices.Clone(gateOps), namedOp{"Stmt.Exec", func(ctx context.Context, _ *sql.DB) error {
			_, err := stmt.ExecContext(ctx)
			return err
		}})

		h := hold(t, db)
		before := c.Stats()
		for _, op := range ops {
			n := c.Stats().RejectedFull
			err := op.run(ctx, db)
			checkGateRefusal(t, op.name, err, ErrAdmissionFull)
			// database/sql retries a driver.ErrBadConn up to three times, each through the gate.
			if got := c.Stats().RejectedFull - n; got != 1 {
				t.Errorf("%s: one call counted %d refusals, want 1", op.name, got)
			}
		}
		if s := c.Stats(); s.Admitted != before.Admitted || s.RejectedTimeout != 0 || s.Canceled != 0 || s.Pool != before.Pool {
			t.Errorf("refusals changed more than RejectedFull: before %+v, after %+v", before, s)
		}
		h.commit(t)
	})
}

// Condition 8.
func TestContractThousandRefusalsConsumeNoPermit(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		const refusals, workers = 1000, 4
		db, c := e.db, e.c
		h := hold(t, db)
		queued := beginQueued(t, db, c, context.Background())

		before := c.Stats()
		var wrong atomic.Int64
		var firstWrong atomic.Value
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := w; i < refusals; i += workers {
					if err := gateOps[i%len(gateOps)].run(context.Background(), db); !errors.Is(err, ErrAdmissionFull) {
						wrong.Add(1)
						firstWrong.CompareAndSwap(nil, fmt.Sprintf("%s: %v", gateOps[i%len(gateOps)].name, err))
					}
				}
			})
		}
		wg.Wait()
		after := c.Stats()
		if n := wrong.Load(); n != 0 {
			t.Errorf("%d of %d calls were not refused with ErrAdmissionFull; first: %v", n, refusals, firstWrong.Load())
		}
		if after.RejectedFull != before.RejectedFull+refusals {
			t.Errorf("RejectedFull grew by %d, want %d", after.RejectedFull-before.RejectedFull, refusals)
		}
		want := before
		want.RejectedFull = after.RejectedFull
		if after != want {
			t.Errorf("refusals changed the gate or pool:\nbefore %+v\nafter  %+v", before, after)
		}

		// Both permits the refusals competed for are intact: the queued transaction gets the
		// execution permit when the holder commits.
		h.commit(t)
		r := <-queued
		if r.err != nil {
			t.Fatalf("the queued transaction: %v", r.err)
		}
		if err := r.tx.Commit(); err != nil {
			t.Fatal(err)
		}
	})
}

// Waits that end

// Condition 9.
func TestContractQueueWaitElapsesWithAdmissionTimeout(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=50ms", func(t *testing.T, e *pgEnv) {
		const wait = 50 * time.Millisecond
		db, c := e.db, e.c
		h := hold(t, db)
		// Q=1: if a timed-out wait kept its admission permit, the second and third calls would be
		// refused with ErrAdmissionFull instead of waiting.
		for _, name := range []string{"Exec", "Begin", "Conn+Exec"} {
			before := c.Stats()
			start := time.Now()
			err := opNamed(name).run(context.Background(), db)
			d := time.Since(start)
			checkGateRefusal(t, name, err, ErrAdmissionTimeout)
			if d < wait || d > wait+5*time.Second {
				t.Errorf("%s: gave up after %v, want gate_queue_wait=%v", name, d, wait)
			}
			s := c.Stats()
			if s.RejectedTimeout != before.RejectedTimeout+1 || s.RejectedFull != before.RejectedFull ||
				s.Canceled != before.Canceled || s.Admitted != before.Admitted {
				t.Errorf("%s: counters before %+v, after %+v; want RejectedTimeout +1 only", name, before, s)
			}
			if s.Running != 1 || s.Waiting != 0 {
				t.Errorf("%s: after the timeout Running = %d, Waiting = %d; want 1, 0", name, s.Running, s.Waiting)
			}
		}
		h.commit(t)
	})
}

// Condition 10.
func TestContractContextDeadlineBeforeQueueWaitReturnsTheContextError(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		db, c := e.db, e.c
		h := hold(t, db)
		for _, name := range []string{"Exec", "Begin", "Query"} {
			before := c.Stats()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			start := time.Now()
			err := opNamed(name).run(ctx, db)
			d := time.Since(start)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || IsRejected(err) || !isGateWaitCanceled(err) {
				t.Errorf("%s: got %v, want the gate's wait ended by context.DeadlineExceeded, not a rejection", name, err)
			}
			if d > 10*time.Second {
				t.Errorf("%s: returned after %v; the context's deadline was 50ms, gate_queue_wait 1m", name, d)
			}
			s := c.Stats()
			if s.Canceled != before.Canceled+1 || s.RejectedTimeout != before.RejectedTimeout ||
				s.RejectedFull != before.RejectedFull || s.Admitted != before.Admitted {
				t.Errorf("%s: counters before %+v, after %+v; want Canceled +1 only", name, before, s)
			}
			if s.Running != 1 || s.Waiting != 0 {
				t.Errorf("%s: Running = %d, Waiting = %d; want 1, 0", name, s.Running, s.Waiting)
			}
		}
		h.commit(t)
	})
}

// Condition 11.
func TestContractCancelWhileQueuedReturnsPromptlyAndKeepsPermits(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		db, c := e.db, e.c
		h := hold(t, db)
		var slowest time.Duration
		for _, op := range gateOps {
			ctx, cancel := context.WithCancel(context.Background())
			done := startQueued(t, c, func() error { return op.run(ctx, db) })
			before := c.Stats()
			start := time.Now()
			cancel()
			err := <-done
			d := time.Since(start)
			slowest = max(slowest, d)
			if !errors.Is(err, context.Canceled) || !isGateWaitCanceled(err) {
				t.Errorf("%s: got %v, want the gate's wait ended by context.Canceled", op.name, err)
			}
			if d > time.Second {
				t.Errorf("%s: returned %v after its context was cancelled", op.name, d)
			}
			s := c.Stats()
			if s.Running != before.Running || s.Waiting != 0 || s.Admitted != before.Admitted ||
				s.Canceled != before.Canceled+1 || s.RejectedFull != before.RejectedFull || s.RejectedTimeout != before.RejectedTimeout {
				t.Errorf("%s: before %+v, after %+v; want only Waiting -1 and Canceled +1", op.name, before, s)
			}
		}
		t.Logf("slowest return after cancel: %v", slowest)
		h.commit(t)
	})
}

// Condition 12. gate_queue_wait belongs to the gate, so a gate with gate_queue_wait=0 never has a
// waiter: every caller takes a free permit or is refused at once. That is "try once"; the first
// subtest shows it. "Never jump the queue" is about callers that try once while others wait, which
// with one gate only arises when later arrivals try once and earlier ones wait; the second subtest
// makes that happen by switching the live gate's queueWait to 0 with waiters queued, as the unit
// test TestGateQueueWaitZeroNeverJumpsTheQueue does, and then shows that the hand-over from a
// committing transaction to the next waiter leaves no moment in which a try-once caller gets in.
func TestContractQueueWaitZeroTriesOnceAndNeverJumpsTheQueue(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		t.Run("tries once", func(t *testing.T) {
			withPG(t, "", drv, "gate_max_conns=1&gate_concurrent=1&gate_queue=2&gate_queue_wait=0", func(t *testing.T, e *pgEnv) {
				db, c := e.db, e.c
				h := hold(t, db) // a free permit is taken at once
				before := c.Stats()
				for _, op := range gateOps {
					start := time.Now()
					err := op.run(context.Background(), db)
					// Q=2 leaves admission room: the refusal is the failed try, not ErrAdmissionFull.
					checkGateRefusal(t, op.name, err, ErrAdmissionTimeout)
					if d := time.Since(start); d > time.Second {
						t.Errorf("%s: refused after %v; with gate_queue_wait=0 it must not wait", op.name, d)
					}
					if s := c.Stats(); s.Waiting != 0 {
						t.Fatalf("%s: Waiting = %d with gate_queue_wait=0", op.name, s.Waiting)
					}
				}
				if s := c.Stats(); s.RejectedTimeout != before.RejectedTimeout+int64(len(gateOps)) ||
					s.RejectedFull != before.RejectedFull || s.Admitted != before.Admitted || s.Running != 1 {
					t.Errorf("before %+v, after %+v; want RejectedTimeout +%d only", before, s, len(gateOps))
				}
				h.commit(t)

				// Under contention nobody ever waits either.
				stop := make(chan struct{})
				var maxWaiting atomic.Int64
				var sampler sync.WaitGroup
				sampler.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						storeMax(&maxWaiting, int64(c.Stats().Waiting))
					}
				})
				var ok, tried atomic.Int64
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						for range 20 {
							_, err := db.ExecContext(context.Background(), "SELECT 1")
							switch {
							case err == nil:
								ok.Add(1)
							case errors.Is(err, ErrAdmissionTimeout):
								tried.Add(1)
							default:
								t.Errorf("try-once caller: %v", err)
							}
						}
					})
				}
				wg.Wait()
				close(stop)
				sampler.Wait()
				t.Logf("160 try-once calls: %d ran, %d refused", ok.Load(), tried.Load())
				if n := maxWaiting.Load(); n != 0 {
					t.Errorf("Waiting reached %d with gate_queue_wait=0", n)
				}
				if s := c.Stats(); s.WaitDuration != 0 {
					t.Errorf("WaitDuration = %v with gate_queue_wait=0", s.WaitDuration)
				}
			})
		})

		t.Run("never jumps the queue", func(t *testing.T) {
			const rounds = 5
			withPG(t, "", drv, "gate_max_conns=1&gate_concurrent=1&gate_queue=2&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
				db, c := e.db, e.c
				setQueueWait := func(d time.Duration) {
					c.gate.mu.Lock()
					c.gate.queueWait = d
					c.gate.mu.Unlock()
				}
				var jumped, tried atomic.Int64
				// hammer starts try-once callers that run until the returned stop is called (at the
				// latest at cleanup, before the DB closes).
				hammer := func() (stop func()) {
					done := make(chan struct{})
					var wg sync.WaitGroup
					for range 4 {
						wg.Go(func() {
							for {
								select {
								case <-done:
									return
								default:
								}
								// Bounded, so that a caller that got in where it must not cannot hang
								// the test waiting for the only physical connection.
								ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
								_, err := db.ExecContext(ctx, "SELECT 1")
								cancel()
								switch {
								case err == nil:
									jumped.Add(1)
								case errors.Is(err, ErrAdmissionTimeout):
									tried.Add(1)
								default:
									t.Errorf("try-once caller neither ran nor was refused (did it get in during a hand-over?): %v", err)
									return
								}
							}
						})
					}
					var once sync.Once
					stop = func() { once.Do(func() { close(done); wg.Wait() }) }
					t.Cleanup(stop)
					return stop
				}
				refusedMore := func() {
					t.Helper()
					n := tried.Load()
					waitFor(t, "try-once callers refused", func() bool { return tried.Load() >= n+20 })
				}

				cur := hold(t, db).tx
				for i := range rounds {
					// One waiter queues, then arrivals try once. Running + waiting = 2 < B+Q = 3, so
					// they pass admission and are refused only for want of an execution permit.
					queued := beginQueued(t, db, c, context.Background())
					setQueueWait(0)
					stop := hammer()
					refusedMore()
					// Commit hands the only permit to the waiter, which leaves the queue empty: a
					// release that freed the permit first and let the waiter take it on waking would
					// give the try-once callers a moment to run.
					err := cur.Commit()
					r := <-queued
					refusedMore()
					stop()
					if err != nil || r.err != nil {
						t.Fatalf("round %d: Commit: %v; waiter: %v", i, err, r.err)
					}
					cur = r.tx
					setQueueWait(time.Minute)
				}
				if j := jumped.Load(); j != 0 {
					t.Errorf("%d try-once callers ran while the permit went from a committing transaction to the waiter", j)
				}
				if err := cur.Commit(); err != nil {
					t.Fatal(err)
				}
				// With nobody waiting, a try-once caller takes the free permit.
				setQueueWait(0)
				if _, err := db.ExecContext(context.Background(), "SELECT 1"); err != nil {
					t.Errorf("try-once caller with a free permit: %v", err)
				}
				t.Logf("%d try-once calls refused during %d hand-overs", tried.Load(), rounds)
			})
		})
	})
}

// Condition 13.
func TestContractWaitersServedInArrivalOrder(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=8&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		const waiters = 8
		db, c, adm := e.db, e.c, e.adm
		// B=1 runs one statement at a time, so the serial column numbers the admissions.
		table := pgTable(t, adm, "seq bigserial PRIMARY KEY, waiter int")
		insert := "INSERT INTO " + table + " (waiter) VALUES ($1)"
		h := hold(t, db)
		var wg sync.WaitGroup
		for i := range waiters {
			before := c.Stats().Waiting
			wg.Go(func() {
				ctx := context.Background()
				if i%2 == 1 {
					if _, err := db.ExecContext(ctx, insert, i); err != nil {
						t.Errorf("waiter %d: %v", i, err)
					}
					return
				}
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				if _, err := tx.ExecContext(ctx, insert, i); err != nil {
					t.Errorf("waiter %d: %v", i, err)
				}
				if err := tx.Commit(); err != nil {
					t.Errorf("waiter %d: %v", i, err)
				}
			})
			waitFor(t, fmt.Sprintf("waiter %d queued", i), func() bool { return c.Stats().Waiting == before+1 })
		}
		h.commit(t)
		wg.Wait()

		rows, err := adm.Query("SELECT waiter FROM " + table + " ORDER BY seq")
		if err != nil {
			t.Fatal(err)
		}
		var order []int
		for rows.Next() {
			var w int
			if err := rows.Scan(&w); err != nil {
				t.Fatal(err)
			}
			order = append(order, w)
		}
		rows.Close()
		if len(order) != waiters {
			t.Fatalf("%d of %d waiters ran: %v", len(order), waiters, order)
		}
		for i, w := range order {
			if w != i {
				t.Fatalf("waiters served in order %v, want arrival order", order)
			}
		}
	})
}

// Condition 14.
func TestContractWaiterWhoseContextEndedIsSkipped(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=2&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		db, c := e.db, e.c
		h := hold(t, db)
		before := c.Stats()

		// The first waiter's context reports its end (Err) before its Done channel closes, so the
		// waiter is still asleep in the queue when the permit is released: the moment I5 is about.
		ended := &endedCtx{Context: context.Background(), done: make(chan struct{})}
		first := beginQueued(t, db, c, ended)
		second := beginQueued(t, db, c, context.Background())
		ended.ended.Store(true)
		h.commit(t)
		var r2 txResult
		select {
		case r2 = <-second:
		case r := <-first:
			if r.err == nil {
				r.tx.Rollback()
			}
			t.Fatalf("the waiter whose context ended returned (%v) before its Done closed: it was handed the permit", r.err)
		}
		if r2.err != nil {
			t.Fatalf("the next waiter did not get the permit: %v", r2.err)
		}
		select {
		case r := <-first:
			t.Fatalf("the waiter whose context ended returned (%v) before its Done closed: it was handed the permit", r.err)
		default:
		}
		if s := c.Stats(); s.Running != 1 || s.Waiting != 0 || s.Admitted != before.Admitted+1 {
			t.Errorf("after the hand-over: %+v; want Running 1, Waiting 0, Admitted +1", s)
		}
		close(ended.done)
		r1 := <-first
		if r1.err == nil {
			r1.tx.Rollback()
			t.Fatal("the waiter whose context ended got a transaction")
		}
		if !errors.Is(r1.err, context.Canceled) || !isGateWaitCanceled(r1.err) {
			t.Errorf("the waiter whose context ended: got %v, want the gate's wait ended by context.Canceled", r1.err)
		}
		if s := c.Stats(); s.Canceled != before.Canceled+1 || s.Admitted != before.Admitted+1 || s.Running != 1 {
			t.Errorf("after the skipped waiter returned: %+v", s)
		}

		// The same with real contexts: the cancel races with the release that follows it.
		cur := r2.tx
		const rounds = 20
		for i := range rounds {
			ctx, cancel := context.WithCancel(context.Background())
			first := beginQueued(t, db, c, ctx)
			second := beginQueued(t, db, c, context.Background())
			cancel()
			if err := cur.Commit(); err != nil {
				t.Fatal(err)
			}
			r2, r1 := <-second, <-first
			if r2.err != nil {
				t.Fatalf("round %d: the next waiter did not get the permit: %v", i, r2.err)
			}
			if r1.err == nil {
				r1.tx.Rollback()
				t.Fatalf("round %d: the waiter whose context ended got a transaction", i)
			}
			if !errors.Is(r1.err, context.Canceled) {
				t.Errorf("round %d: the cancelled waiter: %v", i, r1.err)
			}
			cur = r2.tx
		}
		if err := cur.Commit(); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.Canceled != before.Canceled+1+rounds || s.Admitted != before.Admitted+1+rounds {
			t.Errorf("before %+v, after %+v; want Canceled and Admitted +%d", before, s, 1+rounds)
		}
	})
}

// Condition 15.
func TestContractCountsExactAfterRandomCancellations(t *testing.T) {
	runPG(t, "gate_max_conns=3&gate_concurrent=3&gate_queue=4&gate_queue_wait=20ms", func(t *testing.T, e *pgEnv) {
		const b, q, workers, rounds = 3, 4, 16, 15
		db, c := e.db, e.c
		before := c.Stats()

		stop := make(chan struct{})
		var violations atomic.Int64
		var sampler sync.WaitGroup
		sampler.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if s := c.Stats(); s.Running > b || s.Running+s.Waiting > b+q {
					violations.Add(1)
				}
				time.Sleep(100 * time.Microsecond) // paces the sampling; nothing waits for it
			}
		})

		var ok, admittedErr, full, timedOut, canceled atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
				for range rounds {
					// Three in four callers give up after 0-8ms: while queued, or while their own
					// statement runs. The others wait as long as the gate lets them.
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					if r.IntN(4) != 0 {
						ctx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(8000))*time.Microsecond)
					}
					sleep := fmt.Sprintf("SELECT pg_sleep(%.4f)", float64(r.IntN(4000))/1e6)
					// A pinned connection passes the gate exactly once per attempt, even when the
					// context ended before the call: database/sql hands it to the driver unchecked.
					conn, err := db.Conn(context.Background())
					if err != nil {
						t.Errorf("db.Conn: %v", err)
						cancel()
						return
					}
					if r.IntN(2) == 0 {
						_, err = conn.ExecContext(ctx, sleep)
					} else {
						var tx *sql.Tx
						if tx, err = conn.BeginTx(ctx, nil); err == nil {
							if _, err = tx.ExecContext(ctx, sleep); err == nil {
								err = tx.Commit()
							} else {
								tx.Rollback()
							}
						}
					}
					cancel()
					conn.Close()
					switch {
					case err == nil:
						ok.Add(1)
					case errors.Is(err, ErrAdmissionFull):
						full.Add(1)
					case errors.Is(err, ErrAdmissionTimeout):
						timedOut.Add(1)
					case isGateWaitCanceled(err):
						canceled.Add(1)
					default: // admitted, then failed: the context ended during the work
						admittedErr.Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		sampler.Wait()

		s := c.Stats()
		got := [4]int64{s.Admitted - before.Admitted, s.RejectedFull - before.RejectedFull,
			s.RejectedTimeout - before.RejectedTimeout, s.Canceled - before.Canceled}
		want := [4]int64{ok.Load() + admittedErr.Load(), full.Load(), timedOut.Load(), canceled.Load()}
		t.Logf("%d attempts: %d ran to the end, %d admitted then failed, %d full, %d timed out, %d canceled while queued",
			workers*rounds, ok.Load(), admittedErr.Load(), full.Load(), timedOut.Load(), canceled.Load())
		if got[0]+got[1]+got[2]+got[3] != workers*rounds {
			t.Errorf("Admitted + RejectedFull + RejectedTimeout + Canceled grew by %d for %d attempts (%+v)", got[0]+got[1]+got[2]+got[3], workers*rounds, s)
		}
		if got != want {
			t.Errorf("gate counted [admitted full timeout canceled] = %v, callers saw %v", got, want)
		}
		if want[0] == 0 || want[3] == 0 {
			t.Errorf("want both admitted callers and callers cancelled while queued, got %v", want)
		}
		if n := violations.Load(); n != 0 {
			t.Errorf("%d samples exceeded B or B+Q", n)
		}
	})
}

// Work that goes on after the caller gave up

// A cancelStatement runs on the server until cancelled. marker is in its text, for
// pg_stat_activity.
type cancelStatement struct {
	name, sql, marker string
}

var cancelStatements = []cancelStatement{
	// Stops as soon as the server acts on the cancel request.
	{"stops at once", "SELECT pg_sleep(30)", "pg_sleep(30)"},
	// Catches the cancel and goes on working for 200ms: the caller gave up long before the
	// server stops, so a permit released on the caller's account is caught in the act.
	{"stops 200ms late", "DO $$BEGIN PERFORM pg_sleep(31); EXCEPTION WHEN query_canceled THEN PERFORM pg_sleep(0.2); END$$", "pg_sleep(31)"},
}

// Condition 16.
func TestContractCancelInTransactionKeepsPermitUntilServerStops(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c, app, adm := e.db, e.c, e.app, e.adm
		for _, st := range cancelStatements {
			ctx, cancel := context.WithCancel(context.Background())
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := tx.ExecContext(ctx, st.sql)
				done <- err
			}()
			waitFor(t, "the statement running on the server", func() bool { return activeQueries(t, adm, app, st.marker) == 1 })
			release := watchRelease(c, adm, app, st.marker)
			start := time.Now()
			cancel()
			err = <-done
			t.Logf("%s: Exec returned %v after %v", st.name, err, time.Since(start))
			checkRelease(t, release, st.marker)
			if err := tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
				t.Errorf("%s: the cancelled transaction was not rolled back by database/sql: %v", st.name, err)
			}
		}
	})
}

// Condition 17.
func TestContractCancelOutsideTransactionKeepsPermitUntilServerStops(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c, app, adm := e.db, e.c, e.app, e.adm
		for _, st := range cancelStatements {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := db.ExecContext(ctx, st.sql)
				done <- err
			}()
			waitFor(t, "the statement running on the server", func() bool { return activeQueries(t, adm, app, st.marker) == 1 })
			release := watchRelease(c, adm, app, st.marker)
			start := time.Now()
			cancel()
			err := <-done
			t.Logf("Exec, %s: returned %v after %v", st.name, err, time.Since(start))
			checkRelease(t, release, st.marker)
		}

		// Rows read one by one: each row is larger than the server's 8kB send buffer, so it is sent
		// as soon as it is made, every 50ms. In the second query each row catches the cancel and
		// the query goes on: the server works on after the caller gave up, and its next rows
		// keep coming until the query ends.
		slowRow := pgFunction(t, adm, `(g int) RETURNS text LANGUAGE plpgsql AS $$
			BEGIN
				BEGIN
					PERFORM pg_sleep(0.05);
				EXCEPTION WHEN query_canceled THEN
					NULL;
				END;
				RETURN repeat('x', 9000);
			END $$`)
		for _, q := range []struct {
			name, sql, marker string
			total             int
		}{
			{"stops at once", "SELECT pg_sleep(0.05), repeat('x', 9000) FROM generate_series(1, 100)", "pg_sleep(0.05)", 100},
			{"goes on after the cancel", "SELECT " + slowRow + "(g) FROM generate_series(1, 6) g", slowRow, 6},
		} {
			ctx, cancel := context.WithCancel(context.Background())
			rows, err := db.QueryContext(ctx, q.sql)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			for i := range 3 {
				if !rows.Next() {
					t.Fatalf("rows, %s: row %d: %v", q.name, i+1, rows.Err())
				}
			}
			if s := c.Stats(); s.Running != 1 {
				t.Fatalf("rows, %s: while rows are read Running = %d, want 1", q.name, s.Running)
			}
			release := watchRelease(c, adm, app, q.marker)
			start := time.Now()
			cancel()
			n := 3
			for rows.Next() {
				n++
			}
			t.Logf("rows, %s: %d of %d read, Next stopped with %v after %v", q.name, n, q.total, rows.Err(), time.Since(start))
			if n == q.total && rows.Err() == nil {
				t.Errorf("rows, %s: cancelling the context did not end the iteration", q.name)
			}
			checkRelease(t, release, q.marker)
			rows.Close()
		}
	})
}

// Condition 18.
func TestContractCallerTimeoutNeverReleasesAnotherOperationsPermit(t *testing.T) {
	const b, q = 2, 4
	// P > B: a permit released too early would let a (B+1)th statement run on the server.
	runPG(t, "gate_max_conns=4&gate_concurrent=2&gate_queue=4&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		db, c, app, adm := e.db, e.c, e.app, e.adm

		// sample watches the gate and the server until stop closes; check reports what it saw.
		sample := func(minRunning int) (stop func(), check func(phase string)) {
			done := make(chan struct{})
			var bad atomic.Int64
			var firstBad atomic.Value
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					s := c.Stats()
					var active int
					err := adm.QueryRow(`SELECT count(*) FROM pg_stat_activity
						WHERE application_name = $1 AND state = 'active'`, app).Scan(&active)
					if s.Running < minRunning || s.Running > b || s.Running+s.Waiting > b+q || active > b || err != nil {
						bad.Add(1)
						firstBad.CompareAndSwap(nil, fmt.Sprintf("running %d, waiting %d, active on the server %d, err %v", s.Running, s.Waiting, active, err))
					}
				}
			})
			return func() { close(done); wg.Wait() }, func(phase string) {
				if n := bad.Load(); n != 0 {
					t.Errorf("%s: %d samples broke the budget (running in [%d, %d], admitted <= %d, active on the server <= %d); first: %v",
						phase, n, minRunning, b, b+q, b, firstBad.Load())
				}
			}
		}

		// Phase 1: B holders keep both permits; callers queue behind them and time out.
		h1, h2 := hold(t, db), hold(t, db)
		stop, check := sample(b)
		var admittedWhileFull atomic.Int64
		var wg sync.WaitGroup
		for w := range 12 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 18))
				for i := range 4 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+r.IntN(15))*time.Millisecond)
					op := gateOps[(w+i)%len(gateOps)]
					err := op.run(ctx, db)
					cancel()
					switch {
					case err == nil:
						admittedWhileFull.Add(1)
					case isGateWaitCanceled(err), errors.Is(err, ErrAdmissionFull):
					default:
						t.Errorf("%s behind the holders: %v", op.name, err)
					}
				}
			})
		}
		wg.Wait()
		stop()
		check("timed-out callers behind B holders")
		if n := admittedWhileFull.Load(); n != 0 {
			t.Errorf("%d callers ran while B holders held every permit", n)
		}
		if s := c.Stats(); s.Running != b || s.Waiting != 0 {
			t.Errorf("after the timed-out callers: Running = %d, Waiting = %d; want %d, 0", s.Running, s.Waiting, b)
		}
		for _, h := range []*holder{h1, h2} {
			if _, err := h.tx.Exec("SELECT 1"); err != nil {
				t.Errorf("a holder's transaction after the timeouts: %v", err)
			}
			h.commit(t)
		}

		// Phase 2: one long holder works on the server while callers time out, some while queued
		// and some while their own pg_sleep runs (cancelled on the server).
		long := hold(t, db)
		longStop := make(chan struct{})
		var longErr atomic.Value
		var longWG sync.WaitGroup
		longWG.Go(func() {
			for {
				select {
				case <-longStop:
					return
				default:
				}
				if _, err := long.tx.Exec("SELECT pg_sleep(0.02)"); err != nil {
					longErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
		stop, check = sample(1)
		var inside, maxInside, ok, gaveUp atomic.Int64
		for w := range 8 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 180))
				for range 8 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+r.IntN(35))*time.Millisecond)
					sleep := fmt.Sprintf("SELECT pg_sleep(%.3f)", float64(r.IntN(30))/1000)
					var err error
					if r.IntN(2) == 0 {
						_, err = db.ExecContext(ctx, sleep)
					} else {
						var tx *sql.Tx
						if tx, err = db.BeginTx(ctx, nil); err == nil {
							storeMax(&maxInside, inside.Add(1)+1) // +1: the long holder
							_, err = tx.ExecContext(ctx, sleep)
							inside.Add(-1)
							if err == nil {
								err = tx.Commit()
							} else {
								tx.Rollback()
							}
						}
					}
					cancel()
					if err == nil {
						ok.Add(1)
					} else {
						gaveUp.Add(1)
					}
				}
			})
		}
		wg.Wait()
		stop()
		close(longStop)
		longWG.Wait()
		check("timed-out callers beside a long holder")
		t.Logf("beside the long holder: %d callers finished, %d gave up", ok.Load(), gaveUp.Load())
		if m := maxInside.Load(); m > b {
			t.Errorf("%d transactions were inside the gate at once, B=%d", m, b)
		}
		if err := longErr.Load(); err != nil {
			t.Errorf("the long holder's work failed: %v", err)
		}
		long.commit(t)
	})
}

// A releaseSample is what watchRelease saw when the permit came back.
type releaseSample struct {
	active int // backends of the app still running the watched statement at that moment
	err    error
}

// watchRelease watches a gate that has a permit taken, from now on, and sends on the returned
// channel how many backends of app were running a statement containing marker at the moment
// Running dropped to 0. I4 wants none: a permit comes back only after the server stopped working
// for the operation that held it. It spins instead of sleeping so that the sample follows the
// release as closely as possible; start it before the caller gives up.
func watchRelease(c *Connector, adm *sql.DB, app, marker string) <-chan releaseSample {
	ch := make(chan releaseSample, 1)
	go func() {
		deadline := time.Now().Add(20 * time.Second)
		for c.Stats().Running > 0 {
			if time.Now().After(deadline) {
				ch <- releaseSample{err: fmt.Errorf("the permit did not come back within 20s: %+v", c.Stats())}
				return
			}
			runtime.Gosched()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var s releaseSample
		s.err = adm.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active' AND strpos(query, $2) > 0`, app, marker).Scan(&s.active)
		ch <- s
	}()
	return ch
}

// checkRelease receives from a watchRelease channel and reports a permit that came back while
// the server still worked.
func checkRelease(t testing.TB, ch <-chan releaseSample, marker string) {
	t.Helper()
	s := <-ch
	if s.err != nil {
		t.Fatalf("watching the release: %v", s.err)
	}
	if s.active != 0 {
		t.Errorf("Running dropped to 0 while %d backends still ran %q: the permit came back before the server stopped", s.active, marker)
	}
}
