package gated

// The bulkhead contract, conditions 19–36 (issue 3): server-side limits, pool exhaustion and
// connection health, repeated failures, database/sql features through the gate, and bad input.
// Conditions 1–18 are in contract_lifecycle_test.go. Every test runs once per inner driver unless
// the condition belongs to one driver, and ends with srvQuiet: nothing running or waiting, no
// physical connection in use, all B execution permits available at once, and the gate serving.

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"
	"go.uber.org/goleak"
)

// --- Server-side limits ---

// Condition 19: a statement_timeout set with SET LOCAL cancels the statement on the server with
// 57014, which reaches the caller unchanged; the transaction is rolled back, and the setting ends
// with it.
func TestContractStatementTimeoutFailsWith57014AndRollsBack(t *testing.T) {
	// One physical connection, so that the next operation provably runs on the connection the
	// timeout hit.
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1", func(t *testing.T, e *pgEnv) {
		db, adm, drv := e.db, e.adm, e.drv
		table := pgTable(t, adm, "id int primary key")
		ctx := context.Background()

		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "SET LOCAL statement_timeout = '100ms'"); err != nil {
			t.Fatal(err)
		}
		_, err = tx.ExecContext(ctx, "SELECT pg_sleep(2)")
		if code := driverSQLState(drv, err); code != "57014" {
			t.Fatalf("pg_sleep(2) under statement_timeout 100ms: got %v (SQLSTATE %q), want SQLSTATE 57014", err, code)
		}
		if isGateError(err) || errors.Is(err, driver.ErrBadConn) {
			t.Errorf("server error %v must pass through unchanged, not as a gate error or ErrBadConn", err)
		}
		// The server aborted the transaction: Commit rolls it back and says so.
		err = tx.Commit()
		if want := map[string]error{"pgx": pgx.ErrTxCommitRollback, "postgres": pq.ErrInFailedTransaction}[drv]; !errors.Is(err, want) {
			t.Errorf("Commit of a transaction aborted by statement_timeout: %v; want %v", err, want)
		}
		var rows int
		if err := adm.QueryRow("SELECT count(*) FROM " + table).Scan(&rows); err != nil || rows != 0 {
			t.Errorf("after the aborted transaction the table has %d rows (%v); want 0", rows, err)
		}
		// SET LOCAL ended with the transaction: the next operation on the same gate and the same
		// physical connection runs without the timeout.
		var setting string
		if err := db.QueryRowContext(ctx, "SHOW statement_timeout").Scan(&setting); err != nil || setting != "0" {
			t.Errorf("next operation: statement_timeout = %q, %v; want \"0\"", setting, err)
		}
	})
}

// Condition 20: a lock_timeout while another session holds the row lock fails with 55P03, in
// a transaction and in autocommit, and the permits come back at once.
func TestContractLockTimeoutFailsWith55P03AndReleasesPermits(t *testing.T) {
	runPG(t, "gate_max_conns=2&gate_concurrent=2&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c, adm, drv := e.db, e.c, e.adm, e.drv
		table := pgTable(t, adm, "id int primary key, v int")
		if _, err := adm.Exec("INSERT INTO " + table + " VALUES (1, 0)"); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()

		holder, err := adm.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		var id int
		if err := holder.QueryRowContext(ctx, "SELECT id FROM "+table+" WHERE id = 1 FOR UPDATE").Scan(&id); err != nil {
			t.Fatal(err)
		}

		for _, stmt := range []string{
			"SELECT id FROM " + table + " WHERE id = 1 FOR UPDATE",
			"UPDATE " + table + " SET v = v + 1 WHERE id = 1",
		} {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '50ms'"); err != nil {
				t.Fatal(err)
			}
			_, err = tx.ExecContext(ctx, stmt)
			if code := driverSQLState(drv, err); code != "55P03" {
				t.Errorf("%s with the row locked elsewhere: got %v (SQLSTATE %q), want 55P03", stmt, err, code)
			}
			if err := tx.Rollback(); err != nil {
				t.Errorf("Rollback: %v", err)
			}
			waitFor(t, "permit back after the lock timeout", func() bool {
				s := c.Stats()
				return s.Running == 0 && s.Pool.InUse == 0
			})
		}
		// Without a transaction block too: the statements run in one implicit transaction, whose
		// abort also undoes the SET.
		_, err = db.ExecContext(ctx, "SET lock_timeout = '50ms'; UPDATE "+table+" SET v = v + 1 WHERE id = 1")
		if code := driverSQLState(drv, err); code != "55P03" {
			t.Errorf("autocommit UPDATE with the row locked elsewhere: got %v (SQLSTATE %q), want 55P03", err, code)
		}
		if err := holder.Rollback(); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.RejectedFull+s.RejectedTimeout+s.Canceled != 0 {
			t.Errorf("lock timeouts counted as gate refusals: %+v", s)
		}
		if _, err := db.ExecContext(ctx, "UPDATE "+table+" SET v = v + 1 WHERE id = 1"); err != nil {
			t.Errorf("UPDATE after the lock was released: %v", err)
		}
	})
}

// Condition 21, a database that does not exist: the server accepts the TCP connection and then
// refuses the session. Creating the database makes the same gate work, with no permit lost.
func TestContractMissingDatabaseFailsClearlyAndGateRecoversWhenCreated(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		dbName := fmt.Sprintf("gated_srv_missing_%d_%s", time.Now().UnixNano()%1e9, drv)
		base := strings.Replace(pgtest.URL(t), "/postgres?", "/"+dbName+"?", 1)
		if !strings.Contains(base, dbName) {
			t.Skipf("test server URL %q does not name database postgres", pgtest.URL(t))
		}
		withPG(t, base, drv, "gate_max_conns=2&gate_concurrent=2&gate_queue=2&gate_queue_wait=2s", func(t *testing.T, e *pgEnv) {
			db, c, adm := e.db, e.c, e.adm
			ctx := context.Background()

			for i := range 3 {
				var one int
				err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
				if err == nil {
					t.Fatalf("query %d on a database that does not exist succeeded", i)
				}
				if code := driverSQLState(drv, err); code != "3D000" {
					t.Errorf("got %v (SQLSTATE %q), want invalid_catalog_name 3D000", err, code)
				}
				if i == 0 {
					t.Logf("error: %v", err)
				}
				if !strings.Contains(err.Error(), dbName) || isGateError(err) || errors.Is(err, driver.ErrBadConn) {
					t.Errorf("error %q should name the database and be neither a gate error nor ErrBadConn", err)
				}
				if s := c.Stats(); s.Running != 0 || s.Pool.Open != 0 || s.Pool.InUse != 0 {
					t.Errorf("after a refused connection: Running %d, Pool.Open %d, Pool.InUse %d; want 0",
						s.Running, s.Pool.Open, s.Pool.InUse)
				}
			}
			// A burst: every caller fails the same way (or is refused by the gate), none hangs.
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					_, err := db.ExecContext(ctx, "SELECT 1")
					if err == nil || !(driverSQLState(drv, err) == "3D000" || isGateError(err)) {
						t.Errorf("burst on a missing database: %v", err)
					}
				})
			}
			wg.Wait()
			if s := c.Stats(); s.Pool.ConnectErrors < 3 {
				t.Errorf("Pool.ConnectErrors = %d, want every failed connection counted", s.Pool.ConnectErrors)
			}

			if _, err := adm.Exec("CREATE DATABASE " + dbName); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if _, err := adm.Exec("DROP DATABASE IF EXISTS " + dbName + " WITH (FORCE)"); err != nil {
					t.Errorf("dropping database %s: %v", dbName, err)
				}
			})
		})
	})
}

// Condition 21, a server at max_connections: "too many clients" (53300) while other clients
// hold every slot; the gate serves again as soon as one slot is free.
func TestContractServerAtMaxConnectionsFailsClearlyAndGateRecovers(t *testing.T) {
	cluster := pgtest.NewCluster(t, "max_connections=6", "superuser_reserved_connections=0")
	forEachDriver(t, func(t *testing.T, drv string) {
		withPG(t, cluster.URL(), drv, "gate_max_conns=2&gate_concurrent=2&gate_queue=2&gate_queue_wait=2s", func(t *testing.T, e *pgEnv) {
			db, c := e.db, e.c
			ctx := context.Background()

			// Take every slot with plain pgx connections.
			var fillers []*pgx.Conn
			closeFillers := func() {
				for _, f := range fillers {
					f.Close(ctx)
				}
				fillers = nil
			}
			t.Cleanup(closeFillers)
			for {
				f, err := pgx.Connect(ctx, cluster.URL())
				if err != nil {
					if !strings.Contains(err.Error(), "53300") {
						t.Fatalf("filling max_connections: %v", err)
					}
					break
				}
				fillers = append(fillers, f)
				if len(fillers) > 20 {
					t.Fatal("max_connections=6 let more than 20 connections in")
				}
			}

			for i := range 3 {
				_, err := db.ExecContext(ctx, "SELECT 1")
				if code := driverSQLState(drv, err); code != "53300" {
					t.Fatalf("call %d with the server full: got %v (SQLSTATE %q), want too_many_connections 53300", i, err, code)
				}
				if i == 0 {
					t.Logf("error: %v", err)
				}
				if isGateError(err) || errors.Is(err, driver.ErrBadConn) {
					t.Errorf("error %v is a gate error or ErrBadConn", err)
				}
				if s := c.Stats(); s.Running != 0 || s.Pool.Open != 0 {
					t.Errorf("after a refused connection: Running %d, Pool.Open %d; want 0", s.Running, s.Pool.Open)
				}
			}
			tx, err := db.BeginTx(ctx, nil)
			if code := driverSQLState(drv, err); code != "53300" {
				t.Fatalf("BeginTx with the server full: got %v, want 53300", err)
			} else if tx != nil {
				t.Fatal("BeginTx returned a transaction with its error")
			}

			// One slot free: the gate recovers.
			fillers[0].Close(ctx)
			fillers = fillers[1:]
			waitFor(t, "a free slot", func() bool {
				var one int
				return db.QueryRowContext(ctx, "SELECT 1").Scan(&one) == nil
			})
			closeFillers()
			// The fillers' server processes exit asynchronously; the permit check needs B slots.
			waitFor(t, "the fillers' backends gone", func() bool {
				var n int
				err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").Scan(&n)
				return err == nil && n <= c.Stats().Pool.Open
			})
		})
	})
}

// --- Pool exhaustion and connection health ---

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
func runMixedOverload(t *testing.T, db *sql.DB, c *Connector, adm *sql.DB, app, table string, callers, rounds int) mixedLoad {
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
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
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
					return
				}
				load.maxBackends = max(load.maxBackends, n)
			}
		}
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
	close(stop)
	sampler.Wait()
	load.ok, load.refused = ok.Load(), refused.Load()
	t.Logf("%d succeeded, %d refused; %d samples: max running %d, max admitted %d, max pool open %d, max backends %d",
		load.ok, load.refused, load.samples, load.maxRunning, load.maxAdmitted, load.maxOpen, load.maxBackends)
	if load.ok == 0 {
		t.Error("no operation succeeded")
	}
	return load
}

// Condition 22: the server never sees more than P connections of the application
// (pg_stat_activity) under 10×(B+Q) callers of a mixed workload. TestPGOverloadKeepsEveryBudget
// (driver_test.go) checks the same bound with one kind of transaction.
func TestContractMixedOverloadNeverOpensMoreThanPConnections(t *testing.T) {
	// B = P, the most a single workload may take: every connection the pool may open is in use
	// at the peak.
	const p, b, q = 5, 5, 5
	runPG(t, fmt.Sprintf("gate_max_conns=%d&gate_concurrent=%d&gate_queue=%d&gate_queue_wait=100ms", p, b, q), func(t *testing.T, e *pgEnv) {
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

// Condition 23: database/sql never queues callers in front of the gate when the *sql.DB comes
// from gated.Open. The control subtest shows that the measure can fail: the same workload on a
// *sql.DB with MaxOpenConns below B+Q does wait in database/sql.
func TestContractMixedOverloadNeverWaitsInDatabaseSQLPool(t *testing.T) {
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
		cfg, err := ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		c, err := NewConnector(cfg)
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

// Condition 24: a physical connection terminated while idle in the pool is replaced inside the
// binding of the next operation (the statement got 57P01 on a connection that had been idle, or
// the driver's reset found it dead), so the caller sees no error and the operation is admitted
// once: database/sql did not retry it through the gate.
func TestContractIdleConnectionKilledIsReplacedWithoutError(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=5s", func(t *testing.T, e *pgEnv) {
		db, c, adm := e.db, e.c, e.adm
		table := pgTable(t, adm, "id serial primary key, v int")
		ctx := context.Background()
		prepared, err := db.PrepareContext(ctx, "INSERT INTO "+table+" (v) VALUES ($1)")
		if err != nil {
			t.Fatal(err)
		}
		defer prepared.Close()

		ops := []struct {
			name string
			run  func() error
		}{
			{"QueryRow", func() error {
				var n int
				return db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n)
			}},
			{"Exec", func() error {
				_, err := db.ExecContext(ctx, "INSERT INTO "+table+" (v) VALUES (1)")
				return err
			}},
			{"Query", func() error {
				rows, err := db.QueryContext(ctx, "SELECT generate_series(1, 3)")
				if err != nil {
					return err
				}
				for rows.Next() {
				}
				return errors.Join(rows.Err(), rows.Close())
			}},
			{"BeginTx", func() error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (v) VALUES (2)"); err != nil {
					tx.Rollback()
					return err
				}
				return tx.Commit()
			}},
			{"prepared statement", func() error {
				_, err := prepared.ExecContext(ctx, 3)
				return err
			}},
			{"Ping", func() error { return db.PingContext(ctx) }},
			{"pinned Conn", func() error {
				sc, err := db.Conn(ctx)
				if err != nil {
					return err
				}
				defer sc.Close()
				_, err = sc.ExecContext(ctx, "SET search_path TO public")
				return err
			}},
		}
		check := func(t *testing.T, run func() error) {
			t.Helper()
			pid := backendPID(t, db)
			killBackend(t, adm, pid)
			before := c.Stats()
			if err := run(); err != nil {
				t.Fatalf("first operation after its idle connection was terminated: %v", err)
			}
			if got := c.Stats().Admitted - before.Admitted; got != 1 {
				t.Errorf("the operation was admitted %d times, want 1 (a retry must stay inside the binding)", got)
			}
			waitFor(t, "the dead connection destroyed", func() bool { return c.Stats().Pool.Closed > before.Pool.Closed })
			if now := backendPID(t, db); now == pid {
				t.Errorf("still served by terminated server process %d", pid)
			}
		}
		for _, op := range ops {
			t.Run("right after the kill/"+op.name, func(t *testing.T) { check(t, op.run) })
		}
		// After more than a second idle pgx's ResetSession pings the connection first: the dead
		// connection is then found before any statement is sent.
		t.Run("after more than 1s idle/QueryRow", func(t *testing.T) {
			check(t, func() error {
				lastUse := time.Now()
				waitFor(t, "1.1s of idleness", func() bool { return time.Since(lastUse) > 1100*time.Millisecond })
				return ops[0].run()
			})
		})
	})
}

// Condition 24 in the narrow window between a backend leaving pg_stat_activity and closing its
// socket (killBackend waits that window out): a statement sent then meets a socket closed with
// unread data, and the TCP reset discards the 57P01 notice already queued. pgx reads while it
// writes and still sees 57P01; lib/pq reports only "connection reset by peer". The caller must
// see no error all the same: the socket check before reuse sees the queued notice, and a reset
// on the first statement of a reused connection is replayed.
func TestContractIdleConnectionKilledAsItIsReusedIsReplacedWithoutError(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=5s", func(t *testing.T, e *pgEnv) {
		db, adm := e.db, e.adm
		const rounds = 20
		failed := 0
		var firstErr error
		for range rounds {
			pid := backendPID(t, db)
			killBackendNoExitWait(t, adm, pid)
			if _, err := db.ExecContext(context.Background(), "SELECT 1"); err != nil {
				failed++
				firstErr = cmp.Or(firstErr, err)
			}
		}
		if failed > 0 {
			t.Errorf("%d of %d first statements on a connection terminated just before failed, first with: %v", failed, rounds, firstErr)
		}
	})
}

// Condition 24, the check that finds a dead idle connection before its next statement: it must
// cover the sockets of both drivers, and it must never wait. pgx's background reader may sit in
// a read of an idle connection's socket (it starts when a write is slow and keeps reading when
// the reply came before the write returned), holding the socket's read lock until the server
// next sends something; a check that takes that lock waits forever, with the permit held.
func TestContractIdleSocketCheckCoversBothDrivers(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1", func(t *testing.T, e *pgEnv) {
		db, c, drv := e.db, e.c, e.drv
		backendPID(t, db)
		c.pool.mu.Lock()
		var sock *sockCheck
		if len(c.pool.idle) == 1 {
			sock = c.pool.idle[0].sock
		}
		c.pool.mu.Unlock()
		if sock == nil && runtime.GOOS != "windows" {
			t.Errorf("the idle %s connection has no socket check: a connection killed while idle is sent its next statement", drv)
		}
	})
}

// Condition 25: a connection terminated inside a transaction cannot be replaced (the transaction
// died with it): the caller gets an error, the transaction's work is gone, the permit comes back
// once the connection is destroyed, and the next operation gets another server process.
func TestContractConnectionKilledInTransactionFailsAndIsDiscarded(t *testing.T) {
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
					if errors.Is(err, ErrCommitUnknown) {
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

// Condition 26: a server restart. Idle connections that died with the old server are replaced
// without errors; while the server is down every call fails at once with the connection error
// (not a gate error, not driver.ErrBadConn) and holds no permit; once it is up again everything
// works, with all permits.
func TestContractServerRestartFailsClearlyThenRecoversWithoutLosingPermits(t *testing.T) {
	cluster := pgtest.NewCluster(t)
	forEachDriver(t, func(t *testing.T, drv string) {
		const b = 3
		withPG(t, cluster.URL(), drv, "gate_max_conns=3&gate_concurrent=3&gate_queue=3&gate_queue_wait=2s", func(t *testing.T, e *pgEnv) {
			db, c := e.db, e.c
			ctx := context.Background()
			// pinnedAtOnce binds B pinned connections at the same time, so that B physical
			// connections are used and then idle.
			pinnedAtOnce := func() error {
				var conns []*sql.Conn
				defer func() {
					for _, sc := range conns {
						sc.Close()
					}
				}()
				for range b {
					sc, err := db.Conn(ctx)
					if err != nil {
						return err
					}
					conns = append(conns, sc)
					var one int
					if err := sc.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
						return err
					}
				}
				return nil
			}
			if err := pinnedAtOnce(); err != nil {
				t.Fatal(err)
			}
			if s := c.Stats(); s.Pool.Idle != b {
				t.Fatalf("Pool.Idle = %d, want %d idle connections before the restart", s.Pool.Idle, b)
			}

			cluster.Restart(t)
			if err := pinnedAtOnce(); err != nil {
				t.Fatalf("after a restart, B operations on the B dead idle connections: %v", err)
			}

			cluster.Stop(t)
			outage := []struct {
				name string
				run  func() error
			}{
				{"QueryRow", func() error { var n int; return db.QueryRowContext(ctx, "SELECT 1").Scan(&n) }},
				{"Exec", func() error { _, err := db.ExecContext(ctx, "SELECT 1"); return err }},
				{"BeginTx", func() error {
					tx, err := db.BeginTx(ctx, nil)
					if err == nil {
						tx.Rollback()
					}
					return err
				}},
				{"Prepare", func() error {
					st, err := db.PrepareContext(ctx, "SELECT 1")
					if err == nil {
						st.Close()
					}
					return err
				}},
				{"Ping", func() error { return db.PingContext(ctx) }},
			}
			for _, op := range outage {
				err := op.run()
				switch {
				case err == nil:
					t.Errorf("%s succeeded with the server stopped", op.name)
				case !errors.Is(err, syscall.ECONNREFUSED):
					t.Errorf("%s with the server stopped: %v; want an error matching syscall.ECONNREFUSED", op.name, err)
				case isGateError(err) || errors.Is(err, driver.ErrBadConn):
					t.Errorf("%s with the server stopped: %v is a gate error or driver.ErrBadConn", op.name, err)
				}
				if s := c.Stats(); s.Running != 0 {
					t.Errorf("%s with the server stopped: Running = %d after it returned; want 0", op.name, s.Running)
				}
				// A dead idle connection the call found is destroyed in the background.
				waitFor(t, "no physical connection open", func() bool { return c.Stats().Pool.Open == 0 })
			}
			t.Logf("error during the outage: %v", outage[0].run())
			var wg sync.WaitGroup
			for range 4 * b {
				wg.Go(func() {
					if _, err := db.ExecContext(ctx, "SELECT 1"); err == nil || !(errors.Is(err, syscall.ECONNREFUSED) || isGateError(err)) {
						t.Errorf("burst during the outage: %v", err)
					}
				})
			}
			wg.Wait()

			cluster.Start(t)
			if err := pinnedAtOnce(); err != nil {
				t.Fatalf("after the server came back: %v", err)
			}
		})
	})
}

// --- Repeated failures ---

// Condition 27: 1,000 transactions failing with an SQL error, 1,000 refusals and 1,000
// statements cancelled while pg_sleep runs, interleaved across 64 goroutines. Every permit comes
// back and every attempt is counted exactly once. Each attempt is one BeginTx with a context that
// never ends, so an attempt is admitted or refused and never cancelled while it waits; the
// statement context ends 3ms into a one-second pg_sleep inside the admitted transaction.
//
// 64 goroutines share B+Q = 48 admission permits, so some are refused at any time. A refused
// goroutine waits until some admitted transaction has ended before it tries again, which keeps
// refusals near one per completed transaction instead of a busy loop. B is large because a
// cancelled statement keeps its permit until the driver's cancel cleanup is over (a cancel
// request, and a wait for the backend or a new connection), which takes tens of milliseconds.
func TestContractRepeatedFailuresReturnEveryPermitAndCountersAddUp(t *testing.T) {
	runPG(t, "gate_max_conns=32&gate_concurrent=32&gate_queue=16&gate_queue_wait=10s", func(t *testing.T, e *pgEnv) {
		const goroutines, target = 64, 1000
		db, c, adm, drv := e.db, e.c, e.adm, e.drv
		table := pgTable(t, adm, "id int primary key")
		if _, err := adm.Exec("INSERT INTO " + table + " VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		before := c.Stats()

		var attempts, admitted, refused, sqlErrors, cancelled, cancelledEarly, missed, canceledByServer atomic.Int64
		done := make(chan struct{}) // closed when every target is reached, or on an unexpected error
		var finish sync.Once
		stop := func() { finish.Do(func() { close(done) }) }
		reached := func() bool {
			if sqlErrors.Load() >= target && cancelled.Load() >= target && refused.Load() >= target {
				stop()
			}
			select {
			case <-done:
				return true
			default:
				return false
			}
		}
		ended := make(chan struct{}, goroutines) // one token per admitted transaction that ended

		sqlError := func(tx *sql.Tx) {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1)")
			if code := driverSQLState(drv, err); code != "23505" {
				t.Errorf("duplicate insert: got %v (SQLSTATE %q), want unique_violation 23505", err, code)
				return
			}
			sqlErrors.Add(1)
		}
		cancelMidQuery := func(tx *sql.Tx) {
			sctx, cancel := context.WithTimeout(ctx, 3*time.Millisecond)
			defer cancel()
			_, err := tx.ExecContext(sctx, "SELECT pg_sleep(1)")
			switch code := driverSQLState(drv, err); {
			case err == nil:
				missed.Add(1) // the cancel reached the server before the statement; it ran to the end
			case code == "57014" || errors.Is(err, context.DeadlineExceeded):
				cancelled.Add(1)
				if code == "57014" {
					canceledByServer.Add(1)
				}
			case errors.Is(err, driver.ErrBadConn):
				// The context ended before the statement was sent: pgx reports its
				// contextAlreadyDoneError as driver.ErrBadConn, lib/pq the connection it marked
				// bad when the context ended. Not a mid-query cancel, so not counted as one.
				cancelledEarly.Add(1)
			default:
				t.Errorf("statement cancelled mid-query: %v", err)
			}
		}

		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := 0; !reached(); i++ {
					attempts.Add(1)
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						if !IsRejected(err) {
							t.Errorf("BeginTx: %v", err)
							stop() // nobody may be left waiting for an ended transaction
							return
						}
						refused.Add(1)
						select {
						case <-ended:
						case <-done:
						}
						continue
					}
					admitted.Add(1)
					// Alternate while both kinds are short of the target, then do the one still short.
					if cancelled.Load() >= target || (sqlErrors.Load() < target && (g+i)%2 == 0) {
						sqlError(tx)
					} else {
						cancelMidQuery(tx)
					}
					tx.Rollback() // after a cancel lib/pq has closed the connection: an error here is expected
					select {
					case ended <- struct{}{}:
					default:
					}
				}
			})
		}
		finished := make(chan struct{})
		go func() {
			wg.Wait()
			close(finished)
		}()
		select {
		case <-finished:
		case <-time.After(3 * time.Minute):
			stop()
			t.Fatalf("the workload stalled: %+v", c.Stats())
		}

		waitIdle(t, c)
		s := c.Stats()
		t.Logf("%d attempts: %d admitted (%d SQL errors; %d cancelled mid-query, %d of them with 57014; %d contexts ended before the statement was sent; %d cancels the server ignored), %d refused; gate: %+v",
			attempts.Load(), admitted.Load(), sqlErrors.Load(), cancelled.Load(), canceledByServer.Load(), cancelledEarly.Load(), missed.Load(), refused.Load(), s)
		if got, want := s.Admitted-before.Admitted, admitted.Load(); got != want {
			t.Errorf("Admitted grew by %d, want %d", got, want)
		}
		if got, want := (s.RejectedFull+s.RejectedTimeout)-(before.RejectedFull+before.RejectedTimeout), refused.Load(); got != want {
			t.Errorf("RejectedFull+RejectedTimeout grew by %d, want %d", got, want)
		}
		if got := s.Canceled - before.Canceled; got != 0 {
			t.Errorf("Canceled grew by %d; no attempt had a context that could end", got)
		}
		if got, want := gateAttempts(c)-(before.Admitted+before.RejectedFull+before.RejectedTimeout+before.Canceled), attempts.Load(); got != want {
			t.Errorf("Admitted + RejectedFull + RejectedTimeout + Canceled grew by %d for %d attempts", got, want)
		}
	})
}

// --- database/sql features through the gate ---

// Condition 28: one *sql.Stmt from db.Prepare, executed by 32 goroutines at once. Each execution
// is admitted once (database/sql re-prepares the statement on virtual connections that lack it,
// inside the same binding), and no goroutine ever finds the server process it is on held by
// another: a goroutine records its process while its rows keep the binding, and clears it
// before rows.Close gives the binding up.
func TestContractSharedPreparedStatementPassesGateOnEveryExecution(t *testing.T) {
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

// Condition 29: statements prepared in a transaction, database-level statements moved into a
// transaction, named arguments and sql.Out, all through the gate.
func TestContractTxStatementsNamedArgumentsAndOutParameters(t *testing.T) {
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

// Condition 30: argument types that only the inner driver understands work on the first query
// of a fresh *sql.DB, through QueryRow, a prepared statement and a transaction. database/sql
// converts arguments with the virtual connection's checker before any physical connection is
// bound; several of these types its default converter refuses (defaultRefuses), so they work
// only because the virtual connection defers to the physical one.
func TestContractDriverArgumentTypesWorkOnTheFirstQuery(t *testing.T) {
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

// Condition 31: a pinned *sql.Conn binds at its first statement and keeps its permit, and so its
// physical connection and session, until Close: a SET is seen by its later statements, other
// callers are refused meanwhile, and the whole *sql.Conn is one admission.
func TestContractPinnedConnKeepsSessionAndPermitUntilClose(t *testing.T) {
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
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); !errors.Is(err, ErrAdmissionFull) {
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

// Condition 32: (*sql.Conn).Raw and Unwrap reach the inner driver's connection: pgx's
// *stdlib.Conn and its *pgx.Conn, which works (a query and a COPY), under the *sql.Conn's permit.
func TestContractRawUnwrapReachesThePgxConn(t *testing.T) {
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
			inner, err := Unwrap(ctx, dc)
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
				inner, err := Unwrap(ctx, dc)
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
			_, err := Unwrap(ctx, "not a connection")
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
					inner, err := Unwrap(ctx, dc)
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

// Condition 33: a caller that already holds the only permit (inside a transaction) and uses the
// same gate again waits like anyone else and gets ErrAdmissionTimeout after gate_queue_wait,
// instead of deadlocking; the outer transaction then finishes normally.
func TestContractNestedUseWithOnePermitTimesOutInsteadOfDeadlock(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=200ms", func(t *testing.T, e *pgEnv) {
		const queueWait = 200 * time.Millisecond
		db, c := e.db, e.c
		// A context far beyond gate_queue_wait: a deadlock fails the test instead of hanging it.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		before := c.Stats()

		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		nested := []struct {
			name string
			run  func() error
		}{
			{"QueryRow", func() error { var n int; return db.QueryRowContext(ctx, "SELECT 1").Scan(&n) }},
			{"BeginTx", func() error {
				inner, err := db.BeginTx(ctx, nil)
				if err == nil {
					inner.Rollback()
				}
				return err
			}},
		}
		for _, n := range nested {
			start := time.Now()
			err := n.run()
			waited := time.Since(start)
			if !errors.Is(err, ErrAdmissionTimeout) {
				t.Fatalf("nested %s inside a transaction holding the only permit: %v; want ErrAdmissionTimeout", n.name, err)
			}
			if waited < queueWait {
				t.Errorf("nested %s refused after %v, before gate_queue_wait (%v)", n.name, waited, queueWait)
			}
		}
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
			t.Errorf("outer transaction after the nested refusals: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.RejectedTimeout-before.RejectedTimeout != 2 || s.Admitted-before.Admitted != 1 {
			t.Errorf("counted %d timeouts and %d admissions; want 2 and 1", s.RejectedTimeout-before.RejectedTimeout, s.Admitted-before.Admitted)
		}
	})
}

// Condition 34: db.Close with operations in flight. Waiting operations fail at once with
// ErrClosed; running ones (a statement blocked on a lock, an open transaction) finish normally;
// afterwards the server has no connection of the application left, no goroutine is left, and
// every call fails with database/sql's "sql: database is closed".
func TestContractCloseWithOperationsInFlightLeavesNothingBehind(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		adm := admin(t)
		table := pgTable(t, adm, "id int primary key, v int")
		if _, err := adm.Exec("INSERT INTO " + table + " VALUES (1, 0)"); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		holder, err := adm.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		if _, err := holder.ExecContext(ctx, "SELECT 1 FROM "+table+" WHERE id = 1 FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		leaks := goleak.IgnoreCurrent()

		db, c, app := openPG(t, drv, "gate_max_conns=2&gate_concurrent=2&gate_queue=4&gate_queue_wait=30s")
		// Running 1: a transaction, open and idle.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (2, 0)"); err != nil {
			t.Fatal(err)
		}
		// Running 2: an UPDATE blocked on the row lock.
		blocked := make(chan error, 1)
		go func() {
			_, err := db.ExecContext(ctx, "UPDATE "+table+" SET v = v + 1 WHERE id = 1")
			blocked <- err
		}()
		waitFor(t, "the UPDATE blocked on the lock", func() bool { return activeQueries(t, adm, app, "UPDATE") == 1 })
		// Waiting: four more.
		waiters := make(chan error, 4)
		for range 4 {
			go func() {
				_, err := db.ExecContext(ctx, "SELECT 1")
				waiters <- err
			}()
		}
		waitFor(t, "four waiters", func() bool { return c.Stats().Waiting == 4 })

		if err := db.Close(); err != nil {
			t.Fatalf("db.Close: %v", err)
		}
		for range 4 {
			if err := <-waiters; !errors.Is(err, ErrClosed) {
				t.Errorf("operation waiting at Close: %v; want ErrClosed", err)
			}
		}
		// The operations that were running finish normally.
		if _, err := tx.ExecContext(ctx, "UPDATE "+table+" SET v = 10 WHERE id = 2"); err != nil {
			t.Errorf("statement in a transaction begun before Close: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Errorf("Commit of a transaction begun before Close: %v", err)
		}
		if err := holder.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := <-blocked; err != nil {
			t.Errorf("UPDATE running at Close: %v", err)
		}
		var v int
		if err := adm.QueryRow("SELECT v FROM " + table + " WHERE id = 2").Scan(&v); err != nil || v != 10 {
			t.Errorf("the committed transaction's row: %d, %v", v, err)
		}

		waitFor(t, "no physical connection left", func() bool {
			s := c.Stats()
			return s.Running == 0 && s.Waiting == 0 && s.Pool.Open == 0
		})
		waitFor(t, "no server connection of the application", func() bool { return backends(t, adm, app) == 0 })

		var one int
		for name, err := range map[string]error{
			"QueryRow": db.QueryRowContext(ctx, "SELECT 1").Scan(&one),
			"Exec":     func() error { _, err := db.ExecContext(ctx, "SELECT 1"); return err }(),
			"BeginTx":  func() error { _, err := db.BeginTx(ctx, nil); return err }(),
			"Prepare":  func() error { _, err := db.PrepareContext(ctx, "SELECT 1"); return err }(),
			"Conn":     func() error { _, err := db.Conn(ctx); return err }(),
			"Ping":     db.PingContext(ctx),
		} {
			if err == nil || err.Error() != "sql: database is closed" {
				t.Errorf("%s after Close: %v; want \"sql: database is closed\"", name, err)
			}
		}
		goleak.VerifyNone(t, leaks)
	})
}

// Stats promises that every attempt ends in exactly one of Admitted, RejectedFull,
// RejectedTimeout and Canceled. An operation waiting when the Connector closes fails with
// ErrClosed; it must be counted too.
func TestContractCloseCountsTheWaitersItWakes(t *testing.T) {
	db, c, _ := openPG(t, "pgx", "gate_max_conns=1&gate_concurrent=1&gate_queue=2&gate_queue_wait=30s")
	ctx := context.Background()
	sc, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.ExecContext(ctx, "SELECT 1"); err != nil { // holds the only permit
		t.Fatal(err)
	}
	waiters := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := db.ExecContext(ctx, "SELECT 1")
			waiters <- err
		}()
	}
	waitFor(t, "two waiters", func() bool { return c.Stats().Waiting == 2 })
	db.Close()
	for range 2 {
		if err := <-waiters; !errors.Is(err, ErrClosed) {
			t.Errorf("waiter at Close: %v; want ErrClosed", err)
		}
	}
	sc.Close()
	if got := gateAttempts(c); got != 3 {
		t.Errorf("Admitted + RejectedFull + RejectedTimeout + Canceled = %d for 3 attempts (1 admitted, 2 waiting at Close): %+v", got, c.Stats())
	}
}

// --- Bad input ---

// Condition 35, through the public paths sql.Open("gated", dsn) and gated.Open (dsn_test.go
// covers ParseDSN itself in depth): each error is a *DSNError naming the key, starts with
// "gated: " and does not contain the password.
func TestContractMalformedDSNErrorsNameTheKeyWithoutThePassword(t *testing.T) {
	const url = "postgres://app:" + testPassword + "@db.example/shop?sslmode=disable&"
	const kv = "host=db.example user=app password=" + testPassword + " "
	cases := []struct {
		name, dsn, key string
	}{
		{"unknown key, URL", url + "gate_concurency=4", "gate_concurency"},
		{"unknown key, keyword/value", kv + "gate_timeout=1s", "gate_timeout"},
		{"unparsable count, URL", url + "gate_max_conns=ten", keyMaxConns},
		{"unparsable duration, keyword/value", kv + "gate_queue_wait=soon", keyQueueWait},
		{"duration without unit", url + "gate_max_conn_lifetime=60", keyMaxConnLifetime},
		{"negative count, URL", url + "gate_queue=-1", keyQueue},
		{"negative duration, keyword/value", kv + "gate_max_conn_idle_time=-5m", keyMaxConnIdleTime},
		{"B > P, URL", url + "gate_max_conns=2&gate_concurrent=3", keyConcurrent},
		{"B > P, keyword/value", kv + "gate_concurrent=3 gate_max_conns=2", keyConcurrent},
		{"zero P", kv + "gate_max_conns=0", keyMaxConns},
		{"empty value, URL", url + "gate_queue_wait=", keyQueueWait},
		{"empty driver, keyword/value at the end", kv + "gate_driver=", keyDriver},
		{"empty quoted driver", kv + "gate_driver=''", keyDriver},
		{"key without value", kv + "gate_queue", keyQueue},
		{"repeated key", url + "gate_queue=1&gate_queue=2", keyQueue},
		{"unregistered driver", url + "gate_driver=nosuchdriver", keyDriver},
		{"only gate keys, URL query", "?gate_concurrent=x", keyConcurrent},
		{"only gate keys, keyword/value", "gate_queue=-3", keyQueue},
		// As in libpq, an empty value takes the next word: here the whole password pair.
		{"empty value before the password pair", "host=db.example gate_queue= password=" + testPassword, keyQueue},
		{"empty driver before the password pair", "host=db.example gate_driver= password=" + testPassword, keyDriver},
		{"escaped space joins the password pair", "host=db.example gate_queue_wait=1s\\ password=" + testPassword, keyQueueWait},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(tc.dsn, testPassword) && !strings.HasPrefix(tc.dsn, "?") && !strings.HasPrefix(tc.dsn, "gate_") {
				t.Fatalf("test DSN %q lacks the password", tc.dsn)
			}
			for name, open := range map[string]func(string) (*sql.DB, error){
				"sql.Open":   func(dsn string) (*sql.DB, error) { return sql.Open(DriverName, dsn) },
				"gated.Open": Open,
			} {
				db, err := open(tc.dsn)
				if err == nil {
					db.Close()
					t.Errorf("%s(%q) succeeded", name, tc.dsn)
					continue
				}
				if db != nil {
					t.Errorf("%s returned a *sql.DB with its error", name)
				}
				var de *DSNError
				if !errors.As(err, &de) || de.Key != tc.key {
					t.Errorf("%s: error %q is not a *DSNError for key %s", name, err, tc.key)
				}
				if msg := err.Error(); !strings.HasPrefix(msg, "gated: ") || !strings.Contains(msg, tc.key) {
					t.Errorf("%s: error %q does not start with \"gated: \" and name %s", name, msg, tc.key)
				}
				if strings.Contains(err.Error(), testPassword) {
					t.Errorf("%s: error %q contains the password", name, err)
				}
			}
		})
	}
	// An inner DSN the inner driver cannot parse: no gate_ key to name, and still no password,
	// whether the inner driver reports it from sql.Open or from the first operation.
	for _, tc := range []struct{ name, dsn string }{
		{"pgx, bad port", "postgres://app:" + testPassword + "@db.example:badport/shop"},
		{"pgx, bad sslmode", kv + "sslmode=bogus"},
		{"lib/pq, bad port", "postgres://app:" + testPassword + "@db.example:badport/shop?gate_driver=postgres"},
		{"lib/pq, bad percent-escape", "postgres://app:" + testPassword + "@db.example/shop?x=%zz&gate_driver=postgres"},
		{"lib/pq, bad sslmode", kv + "sslmode=bogus gate_driver=postgres"},
	} {
		t.Run("inner DSN/"+tc.name, func(t *testing.T) {
			for name, open := range map[string]func(string) (*sql.DB, error){
				"sql.Open":   func(dsn string) (*sql.DB, error) { return sql.Open(DriverName, dsn) },
				"gated.Open": Open,
			} {
				db, err := open(tc.dsn)
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					err = db.PingContext(ctx)
					cancel()
					if c, ok := FromDB(db); ok && c.Stats().Running != 0 {
						t.Errorf("%s: the failed first operation kept its permit", name)
					}
					db.Close()
					if err == nil {
						t.Errorf("%s(%q) and its first operation succeeded", name, tc.dsn)
						continue
					}
				} else if !strings.HasPrefix(err.Error(), "gated: ") {
					t.Errorf("%s: error %q does not start with \"gated: \"", name, err)
				}
				if strings.Contains(err.Error(), testPassword) {
					t.Errorf("%s: error %q contains the password", name, err)
				}
			}
		})
	}
}

// Condition 36 is FuzzParseDSN in dsn_test.go (parse, format, parse again: stable; errors are
// *DSNError naming gate_ keys only). Its password check runs on its seeds only, because a mutated
// DSN can legitimately put the password anywhere. This fuzz target fills that gap for the
// property that matters: whatever gate_ material (or, in form 3, URL tail) surrounds a
// well-formed password, no error of ParseDSN or NewConnector quotes it.
func FuzzContractDSNErrorNeverQuotesThePassword(f *testing.F) {
	for _, s := range []string{
		"gate_queue=1", "gate_queue=", "gate_driver=", "gate_queue_wait=1s\\", "gate_queue='", "gate_x",
		"gate_concurrent=3 gate_max_conns=2", "gate_queue=1&gate_queue=2", "gate_driver=nosuch",
		"gate_driver=postgres&x=%zz", ":badport/shop?gate_driver=postgres",
	} {
		for form := range uint8(4) {
			f.Add(s, form)
		}
	}
	f.Fuzz(func(t *testing.T, gate string, form uint8) {
		if strings.Contains(gate, testPassword[:4]) {
			t.Skip("the fuzzed part spells the password itself")
		}
		var dsn string
		switch form % 4 {
		case 0: // keyword/value, password pair after the gate part
			dsn = "host=db " + gate + " password=" + testPassword
		case 1: // keyword/value, password pair before it
			dsn = "host=db password=" + testPassword + " " + gate
		case 2: // URL, gate part as the query
			dsn = "postgres://app:" + testPassword + "@db/shop?" + gate
		case 3: // URL, gate part right after the host: port, path, query
			dsn = "postgres://app:" + testPassword + "@db" + gate
		}
		cfg, err := ParseDSN(dsn)
		if err == nil {
			_, err = NewConnector(cfg)
		}
		checkDSNErrorSafe(t, dsn, err, testPassword)
	})
}
