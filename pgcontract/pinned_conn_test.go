package pgcontract_test

// A pinned *sql.Conn: one admission that keeps its permit, physical connection and session until
// Close, and through Raw and Unwrap the inner driver's own connection.

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// A pinned *sql.Conn binds at its first statement and keeps its permit, and so its
// physical connection and session, until Close: a SET is seen by its later statements, other
// callers are refused meanwhile, and the whole *sql.Conn is one admission.
func TestPinnedConnKeepsSessionAndPermitUntilClose(t *testing.T) {
	// B=1 and Q=0: while the pinned connection holds the permit, anything else is refused.
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c, adm, drv := e.db, e.c, e.adm, e.drv
		schema := fmt.Sprintf("gated_srv_schema_%d_%s", time.Now().UnixNano()%1e9, drv)
		if _, err := adm.Exec("CREATE SCHEMA " + schema + "; CREATE TABLE " + schema + ".only_here (v text); INSERT INTO " + schema + ".only_here VALUES ('pinned')"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { adm.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE") })
		ctx := context.Background()
		before := c.Stats().Admitted

		sc, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		if s := c.Stats(); s.Running != 0 || s.Pool.Open != 0 {
			t.Fatalf("db.Conn bound before its first statement: Running %d, Pool.Open %d", s.Running, s.Pool.Open)
		}
		if _, err := sc.ExecContext(ctx, "SET search_path TO "+schema); err != nil {
			t.Fatal(err)
		}
		held := func(when string) {
			t.Helper()
			if s := c.Stats(); s.Running != 1 {
				t.Errorf("%s: Running = %d, want the pinned connection's permit", when, s.Running)
			}
			var one int
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); !errors.Is(err, gated.ErrAdmissionFull) {
				t.Errorf("%s: another caller got %v, want ErrAdmissionFull while the permit is pinned", when, err)
			}
		}
		held("after SET")
		var v, path string
		if err := sc.QueryRowContext(ctx, "SELECT v, current_setting('search_path') FROM only_here").Scan(&v, &path); err != nil || v != "pinned" || path != schema {
			t.Errorf("query after SET on the same *sql.Conn: %q, %q, %v; want %q, %q", v, path, err, "pinned", schema)
		}
		held("between statements")
		tx, err := sc.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRowContext(ctx, "SELECT v FROM only_here").Scan(&v); err != nil {
			t.Errorf("transaction on the pinned connection does not see the session: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		held("after a transaction on it")
		if err := sc.Close(); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.Running != 0 || s.Admitted-before != 1 {
			t.Errorf("after conn.Close: Running %d, admissions %d; want 0 and one for the whole *sql.Conn", s.Running, s.Admitted-before)
		}
		if _, err := db.ExecContext(ctx, "RESET search_path"); err != nil {
			t.Errorf("after conn.Close the gate refuses: %v", err)
		}
	})
}

// (*sql.Conn).Raw and Unwrap reach the inner driver's connection: pgx's
// *stdlib.Conn and its *pgx.Conn, which works (a query and a COPY), under the *sql.Conn's permit.
func TestRawUnwrapReachesThePgxConn(t *testing.T) {
	withPG(t, "", "pgx", "gate_max_conns=1&gate_concurrent=1&gate_queue=1", func(t *testing.T, e *pgEnv) {
		db, c, adm := e.db, e.c, e.adm
		table := pgTable(t, adm, "id int, name text")
		ctx := context.Background()

		sc, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		err = sc.Raw(func(dc any) error {
			inner, err := gated.Unwrap(ctx, dc)
			if err != nil {
				return err
			}
			std, ok := inner.(*stdlib.Conn)
			if !ok {
				return fmt.Errorf("Unwrap returned %T, want *stdlib.Conn", inner)
			}
			pc := std.Conn()
			var n int
			if err := pc.QueryRow(ctx, "SELECT $1::int + 1", 41).Scan(&n); err != nil || n != 42 {
				return fmt.Errorf("*pgx.Conn query: %d, %v", n, err)
			}
			copied, err := pc.CopyFrom(ctx, pgx.Identifier{table}, []string{"id", "name"},
				pgx.CopyFromRows([][]any{{1, "a"}, {2, "b"}, {3, "c"}}))
			if err != nil || copied != 3 {
				return fmt.Errorf("*pgx.Conn CopyFrom: %d, %v", copied, err)
			}
			if s := c.Stats(); s.Running != 1 {
				return fmt.Errorf("inside Raw Running = %d, want 1", s.Running)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.Running != 1 {
			t.Errorf("after Raw, before conn.Close: Running = %d; the binding lasts until Close", s.Running)
		}
		sc.Close()
		if s := c.Stats(); s.Running != 0 {
			t.Errorf("after conn.Close: Running = %d", s.Running)
		}
		var n int
		if err := db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil || n != 3 {
			t.Errorf("rows copied through *pgx.Conn: %d, %v", n, err)
		}

		t.Run("a transaction left open behind the wrapper discards the connection", func(t *testing.T) {
			before := c.Stats()
			sc, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = sc.Raw(func(dc any) error {
				inner, err := gated.Unwrap(ctx, dc)
				if err != nil {
					return err
				}
				_, err = inner.(*stdlib.Conn).Conn().Begin(ctx)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			sc.Close()
			waitFor(t, "the connection destroyed and its permit back", func() bool {
				s := c.Stats()
				return s.Running == 0 && s.Pool.InUse == 0 && s.Pool.Closed > before.Pool.Closed
			})
		})
		t.Run("Unwrap refuses a connection gated did not make", func(t *testing.T) {
			_, err := gated.Unwrap(ctx, "not a connection")
			if err == nil || !strings.HasPrefix(err.Error(), "gated: ") {
				t.Errorf("Unwrap(string): %v", err)
			}
		})
		t.Run("lib/pq's connection", func(t *testing.T) {
			withPG(t, "", "postgres", "gate_max_conns=1", func(t *testing.T, pqEnv *pgEnv) {
				sc, err := pqEnv.db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer sc.Close()
				err = sc.Raw(func(dc any) error {
					inner, err := gated.Unwrap(ctx, dc)
					if err != nil {
						return err
					}
					if got := fmt.Sprintf("%T", inner); got != "*pq.conn" {
						return fmt.Errorf("Unwrap returned %s, want lib/pq's *pq.conn", got)
					}
					return inner.(driver.Pinger).Ping(ctx)
				})
				if err != nil {
					t.Fatal(err)
				}
				sc.Close()
			})
		})
	})
}
