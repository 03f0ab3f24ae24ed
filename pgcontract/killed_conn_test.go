package pgcontract_test

// A physical connection the server terminated in a transaction fails and is discarded. The
// root package's killed_conn_test.go has the connections terminated while idle, whose tests read
// the pool's internals.

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/gatedsql/gated"
)

// A connection terminated inside a transaction cannot be replaced (the transaction
// died with it): the caller gets an error, the transaction's work is gone, the permit comes back
// once the connection is destroyed, and the next operation gets another server process.
func TestConnectionKilledInTransactionFailsAndIsDiscarded(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=5s", func(t *testing.T, e *pgEnv) {
		db, c, app, adm := e.db, e.c, e.app, e.adm
		table := pgTable(t, adm, "id int primary key")
		ctx := context.Background()

		cases := []struct {
			name string
			// kill terminates the transaction's server process pid and then drives tx into the
			// error the caller must see; it returns the errors the caller saw.
			kill func(t *testing.T, tx *sql.Tx, pid int) []error
		}{
			{"between statements", func(t *testing.T, tx *sql.Tx, pid int) []error {
				killBackend(t, adm, pid)
				_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (2)")
				return []error{err, tx.Commit()}
			}},
			{"before commit", func(t *testing.T, tx *sql.Tx, pid int) []error {
				killBackend(t, adm, pid)
				return []error{tx.Commit()}
			}},
			{"during a statement", func(t *testing.T, tx *sql.Tx, pid int) []error {
				done := make(chan error, 1)
				go func() {
					_, err := tx.ExecContext(ctx, "SELECT pg_sleep(30)")
					done <- err
				}()
				waitFor(t, "pg_sleep running", func() bool { return activeQueries(t, adm, app, "pg_sleep") == 1 })
				killBackend(t, adm, pid)
				err := <-done
				return []error{err, tx.Rollback()}
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := c.Stats()
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1)"); err != nil {
					t.Fatal(err)
				}
				var pid int
				if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					t.Fatal(err)
				}
				errs := tc.kill(t, tx, pid)
				if errs[0] == nil {
					t.Fatal("the caller saw no error after its transaction's connection was terminated")
				}
				for _, err := range errs {
					if err == nil {
						continue
					}
					t.Logf("caller saw: %v", err)
					if isGateError(err) {
						t.Errorf("a terminated connection reported as a gate error: %v", err)
					}
					if errors.Is(err, gated.ErrCommitUnknown) {
						t.Errorf("Commit on a connection terminated before COMMIT was sent reports %v; the transaction certainly did not commit", err)
					}
				}
				waitFor(t, "permit back and the connection destroyed", func() bool {
					s := c.Stats()
					return s.Running == 0 && s.Pool.InUse == 0 && s.Pool.Closed > before.Pool.Closed
				})
				var rows int
				if err := adm.QueryRow("SELECT count(*) FROM " + table).Scan(&rows); err != nil || rows != 0 {
					t.Errorf("table has %d rows (%v) after the transaction died; want 0", rows, err)
				}
				if now := backendPID(t, db); now == pid {
					t.Errorf("next operation served by terminated server process %d", pid)
				}
			})
		}
	})
}
