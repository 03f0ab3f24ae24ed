package gated

// What the stale-statement retry may run again: only a statement the server refused before
// running anything of it. SQLSTATE 0A000 is feature_not_supported, and a procedure raises it
// after its COMMIT as readily as a migration makes the server refuse a cached plan.

import (
	"database/sql"
	"strings"
	"testing"
)

// A statement that commits work and then fails with 0A000 (TRUNCATE of a table a foreign key
// references) runs once, in every shape that reaches the stale-statement retry: a CALL without
// and with arguments, a prepared CALL, and multi-statement strings, including ones whose last
// statement the server refuses exactly as it refuses a stale statement (a session's own stale or
// missing prepared statement, after the COMMIT). The caller gets the server's error, and the
// committed row is there once.
func TestWorkCommittedBeforeFeatureNotSupportedRunsOnce(t *testing.T) {
	runPG(t, oneAtATime, func(t *testing.T, e *pgEnv) {
		parent := pgTable(t, e.adm, "id int primary key")
		pgTable(t, e.adm, "parent_id int references "+parent)
		for _, c := range []struct {
			name string
			run  func(db *sql.DB, proc, log string) error
		}{
			{"CALL without arguments", func(db *sql.DB, proc, _ string) error {
				_, err := db.Exec("CALL " + proc + "()")
				return err
			}},
			{"CALL with an argument", func(db *sql.DB, proc, _ string) error {
				_, err := db.Exec("CALL "+proc+"($1)", 1)
				return err
			}},
			{"prepared CALL", func(db *sql.DB, proc, _ string) error {
				st, err := db.Prepare("CALL " + proc + "($1)")
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				_, err = st.Exec(1)
				return err
			}},
			{"prepared CALL queried", func(db *sql.DB, proc, _ string) error {
				st, err := db.Prepare("CALL " + proc + "($1)")
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				rows, err := st.Query(1)
				if err == nil {
					rows.Close()
				}
				return err
			}},
			{"multi-statement string", func(db *sql.DB, _, log string) error {
				_, err := db.Exec("INSERT INTO " + log + " VALUES (1); COMMIT; TRUNCATE " + parent)
				return err
			}},
			{"multi-statement string failing at top level", func(db *sql.DB, _, log string) error {
				_, err := db.Exec("INSERT INTO " + log + " VALUES (1); COMMIT; SELECT count(*) FROM " + log + " FOR UPDATE")
				return err
			}},
			{"multi-statement string executing a missing session statement", func(db *sql.DB, proc, log string) error {
				_, err := db.Exec("INSERT INTO " + log + " VALUES (1); COMMIT; EXECUTE " + proc + "_missing")
				return err
			}},
			// The server refuses a cached plan here too, but only after the COMMIT: the
			// statement it refuses is the session's own, not one gated or the driver prepared.
			{"multi-statement string executing a stale session statement", func(db *sql.DB, proc, log string) error {
				if _, err := db.Exec("PREPARE " + proc + "_s AS SELECT * FROM " + log); err != nil {
					t.Fatal(err)
				}
				if _, err := e.adm.Exec("ALTER TABLE " + log + " ADD COLUMN y int"); err != nil {
					t.Fatal(err)
				}
				_, err := db.Exec("INSERT INTO " + log + " VALUES (1); COMMIT; EXECUTE " + proc + "_s")
				return err
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				log := pgTable(t, e.adm, "x int")
				proc := pgObject(t, e.adm, "PROCEDURE", "(x int DEFAULT 0) LANGUAGE plpgsql AS $$ BEGIN "+
					"INSERT INTO "+log+" VALUES (x); COMMIT; TRUNCATE "+parent+"; END $$")
				err := c.run(e.db, proc, log)
				want := "0A000"
				if strings.Contains(c.name, "missing") {
					want = "26000"
				}
				if got := driverSQLState(e.drv, err); got != want {
					t.Errorf("error %v (SQLSTATE %q), want the server's %s", err, got, want)
				}
				if n := countRows(t, e.adm, log); n != 1 {
					t.Errorf("%d rows committed, want 1: the statement ran again after it had committed", n)
				}
			})
		}
	})
}

// A query pgx ran before from its statement cache is refused once after a migration changed its
// result type; the server ran nothing, and gated runs it again on a new statement.
func TestCachedQueryRunsAgainAfterAMigration(t *testing.T) {
	withPG(t, "", "pgx", oneAtATime, func(t *testing.T, e *pgEnv) {
		table := pgTable(t, e.adm, "id int")
		query := "SELECT * FROM " + table + " WHERE id > $1"
		for i, want := range []int{1, 2} {
			rows, err := e.db.Query(query, 0)
			if err != nil {
				t.Fatalf("query %d: %v", i, err)
			}
			cols, _ := rows.Columns()
			rows.Close()
			if len(cols) != want {
				t.Errorf("query %d: columns %v, want %d", i, cols, want)
			}
			if i == 0 {
				if _, err := e.adm.Exec("ALTER TABLE " + table + " ADD COLUMN v int"); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
