package pgcontract_test

// When a permit comes back, checked against a real PostgreSQL with every inner driver: when
// Commit or Rollback returns, whatever the server answered, and when Rows are closed or read to
// the end. A broken connection is discarded first.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/gatedsql/gated"
)

// A Commit the server refuses, or that ends an aborted transaction, returns a
// result too, so it is held to the same rule as a successful one.
func TestCommitReturnsAfterPermitsAreBack(t *testing.T) {
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

// A rollback after an SQL error gives the permits back.
func TestRollbackAfterSQLErrorReleasesPermits(t *testing.T) {
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

// A rollback on a terminated backend fails, and the connection is discarded.
func TestRollbackOnTerminatedBackendFailsAndDiscardsTheConnection(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c, adm := e.db, e.c, e.adm
		h := hold(t, db)
		before := c.Stats()
		var killed bool
		// With a timeout, pg_terminate_backend returns once the backend has exited.
		if err := adm.QueryRow("SELECT pg_terminate_backend($1, 10000)", h.PID).Scan(&killed); err != nil || !killed {
			t.Fatalf("pg_terminate_backend(%d): %v, %v", h.PID, killed, err)
		}
		err := h.Tx.Rollback()
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
		if pid == h.PID {
			t.Errorf("the next operation ran on the terminated backend %d", pid)
		}
		if s := c.Stats(); s.Pool.Opened != before.Pool.Opened+1 || s.Pool.Closed != before.Pool.Closed+1 {
			t.Errorf("the next operation did not run on one new connection: pool before %+v, after %+v", before.Pool, s.Pool)
		}
	})
}

// Rows hold their permits until they are closed or read to the end.
func TestRowsHoldPermitsUntilClosedOrExhausted(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c := e.db, e.c
		ctx := context.Background()
		held := func(what string) {
			t.Helper()
			if s := c.Stats(); s.Running != 1 {
				t.Fatalf("%s: Running = %d, want 1", what, s.Running)
			}
			checkGateRefusal(t, what+": another operation", db.PingContext(ctx), gated.ErrAdmissionFull)
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
