package gated

// Tests that each driver call is one lifetime: what guards a call (its context's watch) ends when
// the call returns, and what gated knows of the session after a call comes from the server.

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/sockconn"
)

// appWork stands for the application's own work between two statements, longer than the grace
// after which a context's watch cuts a lib/pq socket short: a watch that outlived its call would
// have fired by the time the next call runs. It is the shape under test, not a synchronization.
const appWork = sockconn.CancelGrace + 50*time.Millisecond

// execWithDeadline runs query through ex under a context of its own that the helper cancels, by
// defer, once the statement has succeeded: the way application helpers bound their statements.
func execWithDeadline(t *testing.T, ex interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, query string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ex.ExecContext(ctx, query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func TestCommitAfterAnEarlierStatementsContextWasCanceledCommits(t *testing.T) {
	runPG(t, "gate_max_conns=2&sslmode=require", func(t *testing.T, e *pgEnv) {
		table := pgTable(t, e.adm, "id int primary key")
		tx, err := e.db.BeginTx(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		execWithDeadline(t, tx, "INSERT INTO "+table+" VALUES (1)")
		time.Sleep(appWork)
		if err := tx.Commit(); err != nil {
			t.Fatalf("Commit after the INSERT's context was canceled by its helper: %v", err)
		}
		if n := countRows(t, e.adm, table); n != 1 {
			t.Errorf("%d rows committed, want 1", n)
		}
	})
}

func TestPinnedConnServesAfterAnEarlierStatementsContextWasCanceled(t *testing.T) {
	runPG(t, "gate_max_conns=2", func(t *testing.T, e *pgEnv) {
		c, err := e.db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		execWithDeadline(t, c, "SELECT 1")
		time.Sleep(appWork)
		var one int
		if err := c.QueryRowContext(context.Background(), "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("the pinned connection's next statement: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSlowCommitAfterAnEarlierStatementsContextWasCanceledIsNotUnknown(t *testing.T) {
	runPG(t, "gate_max_conns=2", func(t *testing.T, e *pgEnv) {
		fn := pgFunction(t, e.adm, "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.3); RETURN NULL; END $$")
		table := pgTable(t, e.adm, "id int primary key") // dropped first, with its trigger
		if _, err := e.adm.Exec("CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON " + table +
			" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION " + fn + "()"); err != nil {
			t.Fatal(err)
		}
		tx, err := e.db.BeginTx(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		execWithDeadline(t, tx, "INSERT INTO "+table+" VALUES (1)")
		err = tx.Commit() // the deferred trigger runs now, for longer than sockconn.CancelGrace
		if errors.Is(err, ErrCommitUnknown) {
			t.Fatalf("a COMMIT that was applied reports: %v", err)
		}
		if err != nil {
			t.Fatalf("Commit: %v", err)
		}
		if n := countRows(t, e.adm, table); n != 1 {
			t.Errorf("%d rows committed, want 1", n)
		}
	})
}

// TestExplicitTransactionOnAPinnedConnDoesNotLeakTheDeadline: gate_statement_timeout=deadline
// must not send its SET inside a transaction the application began with BEGIN (ROLLBACK would
// undo it behind gated's back), so a later caller without a deadline is not limited by an
// earlier caller's.
func TestExplicitTransactionOnAPinnedConnDoesNotLeakTheDeadline(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_statement_timeout=deadline", func(t *testing.T, e *pgEnv) {
		c, err := e.db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.PingContext(context.Background()); err != nil { // connected before the short deadline
			t.Fatal(err)
		}
		// A deadline the server's limit, rounded up, keeps well below the sleep below, and long
		// enough that BEGIN meets it on a loaded machine.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = c.ExecContext(ctx, "BEGIN")
		cancel()
		if err != nil {
			t.Fatalf("BEGIN: %v", err)
		}
		if _, err := c.ExecContext(context.Background(), "ROLLBACK"); err != nil {
			t.Fatalf("ROLLBACK: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.Exec("SELECT pg_sleep(1.5)"); err != nil {
			t.Fatalf("a caller without a deadline after the pinned connection's transaction: %v (SQLSTATE %q)", err, driverSQLState(e.drv, err))
		}
	})
}

// TestFailedStatementInAnExplicitTransactionIsRolledBackByTheCaller: after a statement fails in
// a transaction the application began with BEGIN, gated sends nothing of its own (the server
// would refuse it with 25P02), the caller's ROLLBACK reaches the server, and no later caller finds
// the connection in the aborted transaction.
func TestFailedStatementInAnExplicitTransactionIsRolledBackByTheCaller(t *testing.T) {
	for _, params := range []string{"gate_max_conns=1&gate_statement_timeout=deadline", "gate_max_conns=1", "gate_max_conns=1&gate_statement_timeout=deadline&sslmode=require"} {
		t.Run(params, func(t *testing.T) {
			runPG(t, params, func(t *testing.T, e *pgEnv) {
				c, err := e.db.Conn(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := c.ExecContext(ctx, "BEGIN"); err != nil {
					t.Fatalf("BEGIN: %v", err)
				}
				if _, err := c.ExecContext(ctx, "SELECT 1/0"); driverSQLState(e.drv, err) != "22012" {
					t.Fatalf("SELECT 1/0: %v, want 22012", err)
				}
				if _, err := c.ExecContext(context.Background(), "ROLLBACK"); err != nil {
					t.Fatalf("the caller's ROLLBACK: %v (SQLSTATE %q)", err, driverSQLState(e.drv, err))
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					var one int
					if err := e.db.QueryRow("SELECT 1").Scan(&one); err != nil {
						t.Fatalf("caller %d after the pinned connection's failed transaction: %v (SQLSTATE %q)", i+1, err, driverSQLState(e.drv, err))
					}
				}
			})
		})
	}
}

// TestConnLeftInAnExplicitTransactionIsNotReused: a pinned connection closed inside a
// transaction the application began with BEGIN (never ended) must not serve the next caller.
func TestConnLeftInAnExplicitTransactionIsNotReused(t *testing.T) {
	runPG(t, "gate_max_conns=1&sslmode=require", func(t *testing.T, e *pgEnv) {
		c, err := e.db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ExecContext(context.Background(), "BEGIN"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ExecContext(context.Background(), "SELECT 1/0"); err == nil {
			t.Fatal("SELECT 1/0 succeeded")
		}
		c.Close() // inside the failed transaction
		for i := range 3 {
			var one int
			if err := e.db.QueryRow("SELECT 1").Scan(&one); err != nil {
				t.Fatalf("caller %d after a connection was left in a failed transaction: %v (SQLSTATE %q)", i+1, err, driverSQLState(e.drv, err))
			}
		}
	})
}

// TestLibPQTransactionStatusIsRead: gated reads the transaction status lib/pq recorded from the
// server's last ReadyForQuery, also over TLS, where the socket gated sees carries only
// ciphertext, and without allocating.
func TestLibPQTransactionStatusIsRead(t *testing.T) {
	for _, params := range []string{"gate_max_conns=1&sslmode=disable", "gate_max_conns=1&sslmode=require"} {
		t.Run(params, func(t *testing.T) {
			withPG(t, "", "postgres", params, func(t *testing.T, e *pgEnv) {
				ctx := context.Background()
				c, err := e.db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				status := func() (s byte) {
					t.Helper()
					if err := c.Raw(func(dc any) error {
						inner, err := Unwrap(ctx, dc)
						if err != nil {
							return err
						}
						ic := e.c.pool.wrap(inner, nil) // the driver seam's lib/pq connection
						s = ic.TxStatus()
						if a := testing.AllocsPerRun(100, func() { ic.TxStatus() }); a != 0 {
							t.Errorf("reading lib/pq's transaction status allocates %v times", a)
						}
						return nil
					}); err != nil {
						t.Fatal(err)
					}
					return s
				}
				for _, step := range []struct {
					query string
					want  byte
				}{{"SELECT 1", 'I'}, {"BEGIN", 'T'}, {"SELECT 1/0", 'E'}, {"ROLLBACK", 'I'}} {
					c.ExecContext(ctx, step.query)
					if got := status(); got != step.want {
						t.Errorf("after %s: transaction status %q, want %q", step.query, got, step.want)
					}
				}
				var tls bool
				if err := e.adm.QueryRow("SELECT bool_or(ssl) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE application_name = $1", e.app).Scan(&tls); err != nil {
					t.Fatal(err)
				}
				if want := strings.Contains(params, "require"); tls != want {
					t.Fatalf("the connection uses TLS: %v, want %v", tls, want)
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestLibPQRowsReadReturnsAtItsDeadlineDuringAPartition: a query's call lasts until its rows
// close, so its context's watch still guards the reads of its rows.
func TestLibPQRowsReadReturnsAtItsDeadlineDuringAPartition(t *testing.T) {
	p, base := proxied(t)
	withPG(t, base, "postgres", oneAtATime, func(t *testing.T, e *pgEnv) {
		if err := e.db.PingContext(context.Background()); err != nil { // connected before the short deadline
			t.Fatal(err)
		}
		// Long enough for the first row on a loaded machine (500 ms was not, at a load average
		// of 10 on two cores); the partition is what must not outlast it.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		rows, err := e.db.QueryContext(ctx, "SELECT repeat('x', 1000) FROM generate_series(1, 100000)")
		if err != nil {
			t.Fatal(err)
		}
		if !rows.Next() {
			t.Fatalf("first row: %v", rows.Err())
		}
		p.Blackhole(true)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for rows.Next() {
			}
			rows.Close()
		}()
		within(t, "reading a lib/pq query's rows under a 3s deadline", 15*time.Second, done)
		if err := rows.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("rows.Err() = %v, want an error wrapping context.DeadlineExceeded", err)
		}
		p.Blackhole(false)
		awaitCleanup(t, e.c)
	})
}
