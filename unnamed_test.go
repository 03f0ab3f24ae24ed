package gated

import (
	"context"
	"errors"
	"testing"

	"github.com/lib/pq"
)

// pgbouncerDSNParams are the inner drivers' settings docs/drivers.md recommends behind PgBouncer:
// pgx runs every query with one unnamed statement (Parse, Bind, Execute, Sync), lib/pq
// sends a query's parameters with it in one round trip; neither depends on a statement that
// another server connection prepared. With gate_pooler=transaction gated then prepares no named
// statements either.
var pgbouncerDSNParams = map[string]string{
	"pgx":      "default_query_exec_mode=exec",
	"postgres": "binary_parameters=yes",
}

const poolerKey = "gate_pooler=transaction"

// pgbouncerGatedParams are the DSN parameters docs/drivers.md gives gated behind PgBouncer: the
// driver's setting and the gate (P = B = 8, Q = 8).
var pgbouncerGatedParams = map[string]string{
	"pgx":      "default_query_exec_mode=exec&gate_pooler=transaction&gate_max_conns=8&gate_concurrent=8&gate_queue=8",
	"postgres": "binary_parameters=yes&gate_pooler=transaction&gate_driver=postgres&gate_max_conns=8&gate_concurrent=8&gate_queue=8",
}

// preparedOnServer prepares a statement, runs it twice and returns how many statements the
// session it ran on holds (one physical connection: the DB is opened with oneAtATime).
func preparedOnServer(t *testing.T, e *pgEnv) int {
	t.Helper()
	ctx := context.Background()
	st, err := e.db.PrepareContext(ctx, "SELECT $1::int + 1")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range 2 {
		var got int
		if err := st.QueryRowContext(ctx, i).Scan(&got); err != nil || got != i+1 {
			t.Fatalf("prepared statement: got %d, %v; want %d", got, err, i+1)
		}
	}
	var n int
	if err := e.db.QueryRowContext(ctx, "SELECT count(*) FROM pg_prepared_statements").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNoNamedStatementsWhenTheDriverUsesNone: with docs/drivers.md's PgBouncer settings, a
// statement the application prepares is not prepared on the server (a transaction-pooling
// PgBouncer may run the next use on another server connection); with the drivers' defaults it
// is, and with the drivers' settings alone too, as the plain drivers do (pgx's own suite checks
// it in every exec mode).
func TestNoNamedStatementsWhenTheDriverUsesNone(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		t.Run("default", func(t *testing.T) {
			withPG(t, "", drv, oneAtATime, func(t *testing.T, e *pgEnv) {
				if n := preparedOnServer(t, e); n == 0 {
					t.Error("no statement prepared on the server with the driver's defaults")
				}
			})
		})
		t.Run(pgbouncerDSNParams[drv], func(t *testing.T) {
			withPG(t, "", drv, oneAtATime+"&"+pgbouncerDSNParams[drv], func(t *testing.T, e *pgEnv) {
				if n := preparedOnServer(t, e); n == 0 {
					t.Error("no statement prepared on the server without gate_pooler")
				}
			})
		})
		t.Run(pgbouncerDSNParams[drv]+"&"+poolerKey, func(t *testing.T) {
			withPG(t, "", drv, oneAtATime+"&"+pgbouncerDSNParams[drv]+"&"+poolerKey, func(t *testing.T, e *pgEnv) {
				if n := preparedOnServer(t, e); n != 0 {
					t.Errorf("%d statements prepared on the server, want none", n)
				}
				// Nothing was prepared: an error in the query surfaces at its first use.
				st, err := e.db.Prepare("SELEC 1")
				if err != nil {
					t.Fatalf("Prepare: %v, want the error at first use", err)
				}
				defer st.Close()
				if _, err := st.Exec(); driverSQLState(drv, err) != "42601" {
					t.Errorf("Exec of a syntax error: %v, want SQLSTATE 42601", err)
				}
			})
		})
	})
}

// TestCopyInWithBinaryParameters: lib/pq runs COPY only as a prepared statement, so gated prepares
// it even when binary_parameters=yes makes it prepare nothing else.
func TestCopyInWithBinaryParameters(t *testing.T) {
	withPG(t, "", "postgres", oneAtATime+"&binary_parameters=yes&"+poolerKey, func(t *testing.T, e *pgEnv) {
		table := pgTable(t, e.adm, "id int")
		tx := mustBegin(t, e.db)
		defer tx.Rollback()
		st, err := tx.Prepare("/* load */ " + pq.CopyIn(table, "id"))
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		for i := range 3 {
			if _, err := st.Exec(i); err != nil {
				t.Fatalf("row %d: %v", i, err)
			}
		}
		if _, err := st.Exec(); err != nil {
			t.Fatalf("end: %v", err)
		}
		st.Close()
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if n := countRows(t, e.adm, table); n != 3 {
			t.Errorf("%d rows, want 3", n)
		}
	})
}

// gate_pooler=transaction refuses what cannot work behind a transaction pooler, naming the key:
// an inner DSN whose driver would name statements, and limits sent as startup parameters.
func TestPoolerTransactionRefusesWhatCannotWorkBehindAPooler(t *testing.T) {
	for _, c := range []struct{ dsn, key string }{
		{"postgres://h/db?gate_pooler=transaction", keyPooler},
		{"postgres://h/db?gate_driver=postgres&gate_pooler=transaction", keyPooler},
		{"postgres://h/db?default_query_exec_mode=exec&gate_pooler=transaction&gate_statement_timeout=2s", keyStmtTimeout},
		{"postgres://h/db?default_query_exec_mode=exec&gate_pooler=transaction&gate_statement_timeout=deadline:2s", keyStmtTimeout},
		{"postgres://h/db?default_query_exec_mode=exec&gate_pooler=transaction&gate_lock_timeout=1s", keyLockTimeout},
		{"postgres://h/db?gate_pooler=session", keyPooler},
	} {
		_, err := Open(c.dsn)
		var de *DSNError
		if !errors.As(err, &de) || de.Key != c.key {
			t.Errorf("Open(%q) = %v, want a *DSNError for %s", c.dsn, err, c.key)
		}
	}
	for _, dsn := range []string{
		"postgres://h/db?default_query_exec_mode=exec&gate_pooler=transaction&gate_statement_timeout=deadline",
		"postgres://h/db?default_query_exec_mode=simple_protocol&gate_pooler=transaction",
		"postgres://h/db?binary_parameters=yes&gate_driver=postgres&gate_pooler=transaction",
	} {
		db, err := Open(dsn)
		if err != nil {
			t.Errorf("Open(%q): %v", dsn, err)
			continue
		}
		db.Close()
	}
}
