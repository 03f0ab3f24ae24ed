package pgcontract_test

// Limits the server enforces: statement_timeout, lock_timeout, a database that does not exist
// and a server at max_connections. The server's error reaches the caller unchanged, and no
// permit is lost.

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/lib/pq"
)

// A statement_timeout set with SET LOCAL cancels the statement on the server with
// 57014, which reaches the caller unchanged; the transaction is rolled back, and the setting ends
// with it.
func TestStatementTimeoutFailsWith57014AndRollsBack(t *testing.T) {
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

// A lock_timeout while another session holds the row lock fails with 55P03, in
// a transaction and in autocommit, and the permits come back at once.
func TestLockTimeoutFailsWith55P03AndReleasesPermits(t *testing.T) {
	runPG(t, "gate_max_conns=2&gate_concurrent=2&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c, adm, drv := e.db, e.c, e.adm, e.drv
		table, holder := lockedRow(t, adm)
		ctx := context.Background()

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
		_, err := db.ExecContext(ctx, "SET lock_timeout = '50ms'; UPDATE "+table+" SET v = v + 1 WHERE id = 1")
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

// A database that does not exist: the server accepts the TCP connection and then
// refuses the session. Creating the database makes the same gate work, with no permit lost.
func TestMissingDatabaseFailsClearlyAndGateRecoversWhenCreated(t *testing.T) {
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

// A server at max_connections: "too many clients" (53300) while other clients
// hold every slot; the gate serves again as soon as one slot is free.
func TestServerAtMaxConnectionsFailsClearlyAndGateRecovers(t *testing.T) {
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
