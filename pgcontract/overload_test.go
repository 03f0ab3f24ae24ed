package pgcontract_test

// A mixed workload of 10×(B+Q) callers: the server never sees more than P connections (I2) and
// nobody waits in database/sql's pool (I3).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/pgtest"
)

// mixedLoad is what runMixedOverload saw.
type mixedLoad struct {
	ok, refused                      int64
	maxRunning, maxAdmitted, maxOpen int64
	maxBackends, samples             int64
}

// runMixedOverload runs callers goroutines of a mixed workload against db for rounds operations
// each — Exec, Query, QueryRow, a transaction, a statement shared by all callers, a statement
// prepared per call and a pinned *sql.Conn — while sampling the gate, the pool and, when adm is
// not nil, the server connections of application app in pg_stat_activity. Every operation must
// succeed or be refused by the gate.
func runMixedOverload(t *testing.T, db *sql.DB, c *gated.Connector, adm *sql.DB, app, table string, callers, rounds int) mixedLoad {
	t.Helper()
	ctx := context.Background()
	shared, err := db.PrepareContext(ctx, "SELECT count(*) FROM "+table+" WHERE v = $1")
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()

	ops := []func(i int) error{
		func(i int) error {
			_, err := db.ExecContext(ctx, "INSERT INTO "+table+" (v) VALUES ($1)", i)
			return err
		},
		func(i int) error {
			rows, err := db.QueryContext(ctx, "SELECT id, v FROM "+table+" ORDER BY id DESC LIMIT 5")
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			return errors.Join(rows.Err(), rows.Close())
		},
		func(i int) error {
			var n int
			return db.QueryRowContext(ctx, "SELECT $1::int, pg_sleep(0.002)", i).Scan(&n, new(string))
		},
		func(i int) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			var n int
			if _, err = tx.ExecContext(ctx, "INSERT INTO "+table+" (v) VALUES ($1)", i); err == nil {
				err = tx.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n)
			}
			if err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		func(i int) error {
			var n int
			return shared.QueryRowContext(ctx, i).Scan(&n)
		},
		func(i int) error {
			st, err := db.PrepareContext(ctx, "SELECT $1::int + 1")
			if err != nil {
				return err
			}
			defer st.Close()
			var n int
			return st.QueryRowContext(ctx, i).Scan(&n)
		},
		func(i int) error {
			sc, err := db.Conn(ctx)
			if err != nil {
				return err
			}
			defer sc.Close()
			var pid, again int
			if err := sc.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return err
			}
			if err := sc.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&again); err != nil {
				return err
			}
			if again != pid {
				return fmt.Errorf("a pinned *sql.Conn moved from server process %d to %d", pid, again)
			}
			return nil
		},
	}

	var load mixedLoad
	stop := repeat(func() bool {
		s := c.Stats()
		load.samples++
		load.maxRunning = max(load.maxRunning, int64(s.Running))
		load.maxAdmitted = max(load.maxAdmitted, int64(s.Running+s.Waiting))
		load.maxOpen = max(load.maxOpen, int64(s.Pool.Open))
		if adm != nil {
			var n int64
			// Not backends(): it calls t.Fatal, which only the test's goroutine may.
			if err := adm.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
				t.Errorf("pg_stat_activity: %v", err)
				return false
			}
			load.maxBackends = max(load.maxBackends, n)
		}
		return true
	})
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for r := range rounds {
				err := ops[(g+r)%len(ops)](g*rounds + r)
				switch {
				case err == nil:
					ok.Add(1)
				case isGateError(err):
					refused.Add(1)
				default:
					t.Errorf("operation %d failed with a non-gate error: %v", (g+r)%len(ops), err)
				}
			}
		})
	}
	wg.Wait()
	stop()
	load.ok, load.refused = ok.Load(), refused.Load()
	t.Logf("%d succeeded, %d refused; %d samples: max running %d, max admitted %d, max pool open %d, max backends %d",
		load.ok, load.refused, load.samples, load.maxRunning, load.maxAdmitted, load.maxOpen, load.maxBackends)
	if load.ok == 0 {
		t.Error("no operation succeeded")
	}
	return load
}

// The server never sees more than P connections of the application
// (pg_stat_activity) under 10×(B+Q) callers of a mixed workload. TestPGOverloadKeepsEveryBudget
// (the root package's driver_test.go) checks the same bound with one kind of transaction.
func TestMixedOverloadNeverOpensMoreThanPConnections(t *testing.T) {
	// B = P, the most a single workload may take: every connection the pool may open is in use
	// at the peak.
	const p, b, q = 5, 5, 5
	// Also with gate_concurrent=auto, whose ceiling is then P.
	for _, concurrent := range []string{strconv.Itoa(b), "auto"} {
		t.Run("gate_concurrent="+concurrent, func(t *testing.T) { testMixedOverloadNeverOpensMoreThanP(t, concurrent) })
	}
}

func testMixedOverloadNeverOpensMoreThanP(t *testing.T, concurrent string) {
	const p, b, q = 5, 5, 5
	runPG(t, fmt.Sprintf("gate_max_conns=%d&gate_concurrent=%s&gate_queue=%d&gate_queue_wait=100ms", p, concurrent, q), func(t *testing.T, e *pgEnv) {
		db, c, app, adm := e.db, e.c, e.app, e.adm
		table := pgTable(t, adm, "id serial primary key, v int")
		load := runMixedOverload(t, db, c, adm, app, table, 10*(b+q), 30)
		if load.refused == 0 {
			t.Error("10×(B+Q) callers were never refused: the load did not reach the gate's limits")
		}
		if load.maxBackends > p || load.maxOpen > p {
			t.Errorf("physical connections reached %d in pg_stat_activity, %d in Pool.Open; P=%d", load.maxBackends, load.maxOpen, p)
		}
		if load.maxRunning > b || load.maxAdmitted > b+q {
			t.Errorf("running reached %d (B=%d), running+waiting %d (B+Q=%d)", load.maxRunning, b, load.maxAdmitted, b+q)
		}
		waitIdle(t, c)
		if n := backends(t, adm, app); n > p {
			t.Errorf("%d server connections after the load, P=%d", n, p)
		}
	})
}

// database/sql never queues callers in front of the gate when the *sql.DB comes
// from gated.Open. The control subtest shows that the measure can fail: the same workload on a
// *sql.DB with MaxOpenConns below B+Q does wait in database/sql.
func TestMixedOverloadNeverWaitsInDatabaseSQLPool(t *testing.T) {
	const params = "gate_max_conns=5&gate_concurrent=4&gate_queue=4&gate_queue_wait=50ms"
	runPG(t, params, func(t *testing.T, e *pgEnv) {
		db, c, app, adm := e.db, e.c, e.app, e.adm
		table := pgTable(t, adm, "id serial primary key, v int")
		runMixedOverload(t, db, c, nil, app, table, 80, 30)
		if s := db.Stats(); s.WaitCount != 0 || s.WaitDuration != 0 || s.MaxOpenConnections != 0 {
			t.Errorf("database/sql stats of a gated.Open DB under load: WaitCount %d, WaitDuration %v, MaxOpenConnections %d; want 0, 0, 0",
				s.WaitCount, s.WaitDuration, s.MaxOpenConnections)
		}
	})
	t.Run("control: MaxOpenConns below B+Q waits", func(t *testing.T) {
		dsn, app := pgDSN(t, pgtest.URL(t), "pgx", params)
		cfg, err := gated.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		c, err := gated.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(c)
		t.Cleanup(func() { db.Close() })
		db.SetMaxOpenConns(2)
		adm := admin(t)
		table := pgTable(t, adm, "id serial primary key, v int")
		runMixedOverload(t, db, c, nil, app, table, 80, 4)
		if s := db.Stats(); s.WaitCount == 0 {
			t.Errorf("MaxOpenConns=2 under 80 callers: WaitCount = 0; the measure cannot tell")
		}
		db.SetMaxOpenConns(0) // the permit check holds B connections at once
		checkQuiet(t, db, c, db.Stats().WaitCount)
	})
}
