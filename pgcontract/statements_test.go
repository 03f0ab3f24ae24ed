package pgcontract_test

// database/sql's statements and arguments through the gate: a prepared statement shared by many
// goroutines, statements in transactions, named and output arguments, and argument types only
// the inner driver understands.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/lib/pq"
)

// One *sql.Stmt from db.Prepare, executed by 32 goroutines at once. Each execution
// is admitted once (database/sql re-prepares the statement on virtual connections that lack it,
// inside the same binding), and no goroutine ever finds the server process it is on held by
// another: a goroutine records its process while its rows keep the binding, and clears it
// before rows.Close gives the binding up.
func TestSharedPreparedStatementPassesGateOnEveryExecution(t *testing.T) {
	const b, goroutines, each = 8, 32, 20
	runPG(t, fmt.Sprintf("gate_max_conns=%d&gate_concurrent=%d&gate_queue=%d&gate_queue_wait=30s", b, b, goroutines-b), func(t *testing.T, e *pgEnv) {
		db, c := e.db, e.c
		ctx := context.Background()
		st, err := db.PrepareContext(ctx, "SELECT pg_backend_pid(), $1::int")
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		before := c.Stats().Admitted

		var mu sync.Mutex
		holder := make(map[int]int) // server process → goroutine whose rows are open on it
		var maxRunning atomic.Int64
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				<-start
				for i := range each {
					rows, err := st.QueryContext(ctx, g*each+i)
					if err != nil {
						t.Errorf("execution %d of goroutine %d: %v", i, g, err)
						continue
					}
					var pid, echo int
					if !rows.Next() {
						t.Errorf("no row: %v", rows.Err())
					} else if err := rows.Scan(&pid, &echo); err != nil || echo != g*each+i {
						t.Errorf("row: %d, %v; want %d", echo, err, g*each+i)
					}
					mu.Lock()
					if other, held := holder[pid]; held {
						t.Errorf("goroutine %d runs on server process %d, which goroutine %d holds", g, pid, other)
					}
					holder[pid] = g
					mu.Unlock()
					runtime.Gosched() // let the others run while this binding is held
					storeMax(&maxRunning, int64(c.Stats().Running))
					mu.Lock()
					delete(holder, pid)
					mu.Unlock()
					if err := rows.Close(); err != nil {
						t.Errorf("rows.Close: %v", err)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if got := c.Stats().Admitted - before; got != goroutines*each {
			t.Errorf("Admitted grew by %d for %d executions; want one admission per execution", got, goroutines*each)
		}
		if maxRunning.Load() > b {
			t.Errorf("Running reached %d > B=%d", maxRunning.Load(), b)
		}
	})
}

// Statements prepared in a transaction, database-level statements moved into a
// transaction, named arguments and sql.Out, all through the gate.
func TestTxStatementsNamedArgumentsAndOutParameters(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=5s", func(t *testing.T, e *pgEnv) {
		db, c, adm, drv := e.db, e.c, e.adm, e.drv
		table := pgTable(t, adm, "id int primary key")
		ctx := context.Background()
		count := func(t *testing.T) int {
			t.Helper()
			var n int
			if err := adm.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}

		t.Run("tx.Prepare runs inside the transaction's single admission", func(t *testing.T) {
			before := c.Stats().Admitted
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			st, err := tx.PrepareContext(ctx, "INSERT INTO "+table+" VALUES ($1)")
			if err != nil {
				t.Fatal(err)
			}
			for id := 1; id <= 3; id++ {
				if _, err := st.ExecContext(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if s := c.Stats(); s.Running != 1 || s.Admitted-before != 1 {
				t.Errorf("inside the transaction: Running %d, admitted %d; want 1, 1", s.Running, s.Admitted-before)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if _, err := st.ExecContext(ctx, 4); err == nil {
				t.Error("a tx.Prepare statement still ran after Commit")
			}
			if n := count(t); n != 3 {
				t.Errorf("%d rows, want 3", n)
			}
			if got := c.Stats().Admitted - before; got != 1 {
				t.Errorf("admitted %d times, want 1", got)
			}
		})

		t.Run("tx.Stmt moves a db.Prepare statement into the transaction", func(t *testing.T) {
			dbStmt, err := db.PrepareContext(ctx, "INSERT INTO "+table+" VALUES ($1)")
			if err != nil {
				t.Fatal(err)
			}
			defer dbStmt.Close()
			before := c.Stats().Admitted
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			txStmt := tx.StmtContext(ctx, dbStmt)
			for _, id := range []int{10, 11} {
				if _, err := txStmt.ExecContext(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if n := count(t); n != 3 {
				t.Errorf("%d rows after Rollback, want the 3 of before", n)
			}
			if _, err := dbStmt.ExecContext(ctx, 12); err != nil {
				t.Fatal(err)
			}
			if got := c.Stats().Admitted - before; got != 2 {
				t.Errorf("transaction and one statement execution admitted %d times, want 2", got)
			}
		})

		t.Run("named arguments", func(t *testing.T) {
			// database/sql passes sql.Named with its ordinal; both drivers ignore the name and
			// bind by position, so $n placeholders follow the argument order.
			var first, second int
			err := db.QueryRowContext(ctx, "SELECT $1::int, $2::int", sql.Named("b", 2), sql.Named("a", 1)).Scan(&first, &second)
			if err != nil || first != 2 || second != 1 {
				t.Errorf("sql.Named bound by position: got %d, %d, %v; want 2, 1", first, second, err)
			}
			// @name placeholders are not rewritten for sql.Named: the server sees a column.
			_, err = db.ExecContext(ctx, "SELECT @a::int", sql.Named("a", 1))
			if code := driverSQLState(drv, err); code != "42703" {
				t.Errorf("@name with sql.Named: got %v (SQLSTATE %q), want undefined_column 42703", err, code)
			}
			// database/sql refuses a name that is not an identifier before any driver call.
			before := gateAttempts(c)
			_, err = db.ExecContext(ctx, "SELECT $1::int", sql.Named("1a", 1))
			if err == nil || !strings.Contains(err.Error(), "does not begin with a letter") {
				t.Errorf("sql.Named(\"1a\"): %v; want database/sql's name error", err)
			}
			if got := gateAttempts(c) - before; got != 0 {
				t.Errorf("an argument database/sql refuses reached the gate %d times", got)
			}
			// pgx's own named arguments: pgx.NamedArgs rewrites @name placeholders.
			err = db.QueryRowContext(ctx, "SELECT @a::int, @b::int", pgx.NamedArgs{"a": 1, "b": 2}).Scan(&first, &second)
			switch drv {
			case "pgx":
				if err != nil || first != 1 || second != 2 {
					t.Errorf("pgx.NamedArgs: got %d, %d, %v; want 1, 2", first, second, err)
				}
			case "postgres":
				if err == nil || !strings.Contains(err.Error(), "unsupported type pgx.NamedArgs") {
					t.Errorf("pgx.NamedArgs with lib/pq: %v; want the unsupported type error", err)
				}
			}
		})

		t.Run("sql.Out fails cleanly", func(t *testing.T) {
			// Neither driver supports output parameters: the error comes after binding, from the
			// physical connection's argument rules (lib/pq) or pgx's encoder, and the permit is
			// back when the call returns.
			var dest int
			for _, run := range []func() error{
				func() error { _, err := db.ExecContext(ctx, "SELECT $1::int", sql.Out{Dest: &dest}); return err },
				func() error {
					return db.QueryRowContext(ctx, "SELECT $1::int", sql.Out{Dest: &dest, In: true}).Scan(&dest)
				},
				func() error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					_, err = tx.ExecContext(ctx, "SELECT $1::int", sql.Out{Dest: &dest})
					return err
				},
			} {
				err := run()
				want := map[string]string{"pgx": "unable to encode sql.Out", "postgres": "unsupported type sql.Out"}[drv]
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("sql.Out argument: %v; want an error containing %q", err, want)
				} else if isGateError(err) || errors.Is(err, driver.ErrBadConn) {
					t.Errorf("sql.Out argument: %v is a gate error or driver.ErrBadConn", err)
				}
				if s := c.Stats(); s.Running != 0 {
					t.Errorf("after the sql.Out error Running = %d", s.Running)
				}
			}
		})
	})
}

// Argument types that only the inner driver understands work on the first query
// of a fresh *sql.DB, through QueryRow, a prepared statement and a transaction. database/sql
// converts arguments with the virtual connection's checker before any physical connection is
// bound; several of these types its default converter refuses (defaultRefuses), so they work
// only because the virtual connection defers to the physical one.
func TestDriverArgumentTypesWorkOnTheFirstQuery(t *testing.T) {
	type argCase struct {
		name, query    string
		arg            any
		want           string
		defaultRefuses bool
	}
	run := func(t *testing.T, drv string, cases []argCase) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if _, err := driver.DefaultParameterConverter.ConvertValue(tc.arg); (err != nil) != tc.defaultRefuses {
					t.Errorf("database/sql's default converter: %v; the case says refused = %v", err, tc.defaultRefuses)
				}
				ctx := context.Background()
				for _, how := range []string{"QueryRow", "Prepare", "BeginTx"} {
					withPG(t, "", drv, "gate_max_conns=1&gate_concurrent=1&gate_queue=1", func(t *testing.T, e *pgEnv) {
						db, c := e.db, e.c
						var got string
						var err error
						switch how {
						case "QueryRow":
							err = db.QueryRowContext(ctx, tc.query, tc.arg).Scan(&got)
						case "Prepare":
							var st *sql.Stmt
							if st, err = db.PrepareContext(ctx, tc.query); err == nil {
								err = st.QueryRowContext(ctx, tc.arg).Scan(&got)
								st.Close()
							}
						case "BeginTx":
							var tx *sql.Tx
							if tx, err = db.BeginTx(ctx, nil); err == nil {
								err = tx.QueryRowContext(ctx, tc.query, tc.arg).Scan(&got)
								tx.Rollback()
							}
						}
						if err != nil || got != tc.want {
							t.Errorf("%s: got %q, %v; want %q", how, got, err, tc.want)
						}
						if s := c.Stats(); s.Pool.Opened != 1 {
							t.Errorf("%s: %d physical connections opened; want the first query of a fresh DB", how, s.Pool.Opened)
						}
					})
				}
			})
		}
	}
	t.Run("pgx", func(t *testing.T) {
		run(t, "pgx", []argCase{
			{"[]string", "SELECT ($1::text[])::text", []string{"a", "b c"}, `{a,"b c"}`, true},
			{"[]int64", "SELECT sum(x)::text FROM unnest($1::int8[]) x", []int64{1, 2, 1 << 40}, "1099511627779", true},
			{"uint64 above 2^63", "SELECT $1::numeric::text", uint64(1<<63 + 5), "9223372036854775813", true},
			{"pgtype.Range", "SELECT $1::int4range::text",
				pgtype.Range[pgtype.Int4]{Lower: pgtype.Int4{Int32: 1, Valid: true}, Upper: pgtype.Int4{Int32: 5, Valid: true},
					LowerType: pgtype.Inclusive, UpperType: pgtype.Exclusive, Valid: true}, "[1,5)", true},
			{"pgtype.Interval", "SELECT $1::interval::text", pgtype.Interval{Microseconds: 90_000_000, Days: 2, Valid: true}, "2 days 00:01:30", false},
			{"pgtype.Text null", "SELECT coalesce($1::text, 'null')", pgtype.Text{}, "null", false},
		})
	})
	t.Run("postgres", func(t *testing.T) {
		run(t, "postgres", []argCase{
			{"pq.Array []string", "SELECT ($1::text[])::text", pq.Array([]string{"a", "b c"}), `{a,"b c"}`, false},
			{"pq.Array []int64", "SELECT sum(x)::text FROM unnest($1::int8[]) x", pq.Array([]int64{1, 2, 1 << 40}), "1099511627779", false},
			// lib/pq 1.11+ converts plain slices and large uint64 itself (its NamedValueChecker).
			{"[]int64", "SELECT sum(x)::text FROM unnest($1::int8[]) x", []int64{1, 2, 1 << 40}, "1099511627779", true},
			{"uint64 above 2^63", "SELECT $1::numeric::text", uint64(1<<63 + 5), "9223372036854775813", true},
		})
		t.Run("pq.Array scans back", func(t *testing.T) {
			withPG(t, "", "postgres", "gate_max_conns=1", func(t *testing.T, e *pgEnv) {
				var got []string
				if err := e.db.QueryRow("SELECT ARRAY['x', 'y z']").Scan(pq.Array(&got)); err != nil || len(got) != 2 || got[1] != "y z" {
					t.Errorf("pq.Array scan: %q, %v", got, err)
				}
			})
		})
	})
}
