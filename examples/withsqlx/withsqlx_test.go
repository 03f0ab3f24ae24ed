package withsqlx_test

import (
	"context"
	"slices"
	"testing"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/examples/internal/extest"
	"github.com/gatedsql/gated/examples/withsqlx"
	"github.com/jmoiron/sqlx"
)

func TestMain(m *testing.M) { extest.Main(m) }

type person struct {
	ID    int64  `db:"id"`
	Name  string `db:"name"`
	Email string `db:"email"`
}

const schema = `CREATE TABLE person (id bigserial PRIMARY KEY, name text NOT NULL, email text NOT NULL UNIQUE)`

// open opens the example's *sqlx.DB on a fresh schema with the person table.
func open(t *testing.T, drv, params string) *sqlx.DB {
	t.Helper()
	dbx, err := withsqlx.Open(extest.DSN(t, drv, params))
	if err != nil {
		t.Fatal(err)
	}
	extest.CheckQuiet(t, dbx.DB)
	dbx.MustExec(schema)
	return dbx
}

// TestSQLx runs sqlx's everyday calls through gated on both inner drivers: NamedExec, Select,
// Get, NamedQuery, In with Rebind, and Beginx with commit and rollback.
func TestSQLx(t *testing.T) {
	extest.ForEachDriver(t, func(t *testing.T, drv string) {
		ctx := context.Background()
		dbx := open(t, drv, "gate_concurrent=4")
		if got := dbx.Rebind("?, ?"); got != "$1, $2" {
			t.Fatalf("Rebind: %q; want PostgreSQL's $n bind variables", got)
		}

		people := []person{{Name: "Ada", Email: "ada@example.com"}, {Name: "Alan", Email: "alan@example.com"},
			{Name: "Grace", Email: "grace@example.com"}}
		res, err := dbx.NamedExecContext(ctx, `INSERT INTO person (name, email) VALUES (:name, :email)`, people)
		if err != nil {
			t.Fatalf("NamedExec: %v", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 3 {
			t.Fatalf("NamedExec: %d rows affected, %v; want 3", n, err)
		}

		var all []person
		if err := dbx.SelectContext(ctx, &all, `SELECT id, name, email FROM person ORDER BY id`); err != nil {
			t.Fatalf("Select: %v", err)
		}
		if names := names(all); !slices.Equal(names, []string{"Ada", "Alan", "Grace"}) {
			t.Fatalf("Select: %q", names)
		}

		var grace person
		if err := dbx.GetContext(ctx, &grace, `SELECT id, name, email FROM person WHERE email = $1`, "grace@example.com"); err != nil {
			t.Fatalf("Get: %v", err)
		}
		if grace.Name != "Grace" || grace.ID != all[2].ID {
			t.Fatalf("Get: %+v; want %+v", grace, all[2])
		}

		rows, err := dbx.NamedQueryContext(ctx, `SELECT id, name, email FROM person WHERE name LIKE :prefix ORDER BY id`,
			map[string]any{"prefix": "A%"})
		if err != nil {
			t.Fatalf("NamedQuery: %v", err)
		}
		var named []person
		for rows.Next() {
			var p person
			if err := rows.StructScan(&p); err != nil {
				t.Fatalf("NamedQuery StructScan: %v", err)
			}
			named = append(named, p)
		}
		if err := rows.Close(); err != nil {
			t.Fatalf("NamedQuery: %v", err)
		}
		if names := names(named); !slices.Equal(names, []string{"Ada", "Alan"}) {
			t.Fatalf("NamedQuery: %q", names)
		}

		query, args, err := sqlx.In(`SELECT id, name, email FROM person WHERE id IN (?) ORDER BY id`, []int64{all[0].ID, all[2].ID})
		if err != nil {
			t.Fatalf("In: %v", err)
		}
		var some []person
		if err := dbx.SelectContext(ctx, &some, dbx.Rebind(query), args...); err != nil {
			t.Fatalf("Select with In and Rebind: %v", err)
		}
		if names := names(some); !slices.Equal(names, []string{"Ada", "Grace"}) {
			t.Fatalf("In + Rebind: %q", names)
		}

		tx, err := dbx.BeginTxx(ctx, nil)
		if err != nil {
			t.Fatalf("Beginx: %v", err)
		}
		if _, err := tx.NamedExecContext(ctx, `UPDATE person SET name = :name WHERE id = :id`, person{ID: grace.ID, Name: "Grace Hopper"}); err != nil {
			t.Fatalf("tx NamedExec: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("Commit: %v", err)
		}
		tx, err = dbx.Beginx()
		if err != nil {
			t.Fatalf("Beginx: %v", err)
		}
		tx.MustExec(`DELETE FROM person`)
		if err := tx.Rollback(); err != nil {
			t.Fatalf("Rollback: %v", err)
		}
		var n int
		if err := dbx.Get(&n, `SELECT count(*) FROM person WHERE name = 'Grace Hopper'`); err != nil || n != 1 {
			t.Fatalf("after commit and rollback: %d rows named Grace Hopper, %v; want 1", n, err)
		}
	})
}

// TestSQLxRefusalIsGatedError checks that the gate's refusal reaches an sqlx caller as gated's
// error: with B=1, Q=0 and the permit held by an sqlx transaction, a Get is refused at once.
func TestSQLxRefusalIsGatedError(t *testing.T) {
	extest.ForEachDriver(t, func(t *testing.T, drv string) {
		dbx := open(t, drv, "gate_concurrent=1&gate_queue=0")
		tx := dbx.MustBegin()
		defer tx.Rollback()
		var n int
		if err := tx.Get(&n, `SELECT count(*) FROM person`); err != nil {
			t.Fatal(err)
		}
		err := dbx.Get(&n, `SELECT count(*) FROM person`)
		if !gated.IsRejected(err) {
			t.Fatalf("Get while the only permit is held: %v; want a gated refusal", err)
		}
	})
}

// TestBindDriver checks the other one-liner: after sqlx.BindDriver("gated", sqlx.DOLLAR), a
// handle opened with sqlx.Open("gated", ...) uses $n and runs a query with arguments.
func TestBindDriver(t *testing.T) {
	sqlx.BindDriver("gated", sqlx.DOLLAR)
	extest.ForEachDriver(t, func(t *testing.T, drv string) {
		dbx, err := sqlx.Open("gated", extest.DSN(t, drv, ""))
		if err != nil {
			t.Fatal(err)
		}
		extest.CheckQuiet(t, dbx.DB)
		var got int
		if err := dbx.Get(&got, dbx.Rebind(`SELECT ?::int + ?::int`), 40, 2); err != nil || got != 42 {
			t.Fatalf("Get with rebound arguments: %d, %v; want 42", got, err)
		}
	})
}

func names(ps []person) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}
