package gated

// Physical connections the server terminated while idle: one is replaced inside the next
// operation's binding without an error once it rested long enough to be checked (the pool's
// threshold, checkAfterRest), one reused within its rest runs its statement at most once, and
// the check covers the sockets of both drivers. They read the pool's internals, so they stay
// beside it; pgcontract/killed_conn_test.go has the connection terminated in a transaction.

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// A physical connection terminated while idle in the pool is replaced inside the
// binding of the next operation (the statement got 57P01 on a connection that had been idle, or
// the driver's reset found it dead), so the caller sees no error and the operation is admitted
// once: database/sql did not retry it through the gate.
func TestIdleConnectionKilledIsReplacedWithoutError(t *testing.T) {
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
					return fmt.Errorf("BeginTx: %w", err)
				}
				if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (v) VALUES (2)"); err != nil {
					tx.Rollback()
					return fmt.Errorf("INSERT in the transaction: %w", err)
				}
				if err := tx.Commit(); err != nil {
					return fmt.Errorf("Commit: %w", err)
				}
				return nil
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
			idle := time.Now()
			killBackend(t, adm, pid)
			restedLongEnough(t, idle)
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

// A connection killed while idle, in the narrow window between a backend leaving pg_stat_activity and closing its
// socket (killBackend waits that window out): a statement sent then meets a socket closed with
// unread data, and the TCP reset discards the 57P01 notice already queued. pgx reads while it
// writes and still sees 57P01; lib/pq reports only "connection reset by peer". The caller must
// see no error all the same: the socket check before reuse sees the queued notice, and a reset
// on the first statement of a reused connection is replayed.
func TestIdleConnectionKilledAsItIsReusedIsReplacedWithoutError(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=5s", func(t *testing.T, e *pgEnv) {
		db, adm := e.db, e.adm
		const rounds = 20
		failed := 0
		var firstErr error
		for range rounds {
			pid := backendPID(t, db)
			idle := time.Now()
			killBackendNoExitWait(t, adm, pid)
			restedLongEnough(t, idle)
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

// restedLongEnough returns once checkAfterRest has passed since idle, a time after the pool's
// one connection went back idle: its next operation checks the socket before it writes.
func restedLongEnough(t *testing.T, idle time.Time) {
	t.Helper()
	waitFor(t, "the idle connection rested long enough to be checked", func() bool { return time.Since(idle) >= checkAfterRest })
}

// A connection the server terminated, reused before it rested long enough to be checked (the
// pool's threshold raised so that this is certain). With pgx its statement is sent to a session
// that has ended: it runs at most once, either on a new connection when nothing of it was sent,
// or it fails, never as driver.ErrBadConn (database/sql would run it again), and nothing ran.
// lib/pq reports such a failure only as a bad connection, which the plain lib/pq lets
// database/sql run again, so its connections are checked before every reuse whatever the
// threshold: the statement runs once, without an error. Either way the operation is admitted
// once, the dead connection is destroyed and the next operation runs on a new one.
func TestIdleConnectionKilledWithinItsRestRunsItsStatementAtMostOnce(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=5s", func(t *testing.T, e *pgEnv) {
		db, c, adm := e.db, e.c, e.adm
		c.pool.checkRest = time.Hour
		table := pgTable(t, adm, "v int")
		ctx := context.Background()
		for round := range 5 {
			pid := backendPID(t, db)
			killBackend(t, adm, pid)
			before := c.Stats()
			_, err := db.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (v) VALUES (%d)", table, round))
			if errors.Is(err, driver.ErrBadConn) {
				t.Fatalf("round %d: the statement sent to a terminated session failed with driver.ErrBadConn, which database/sql retries: %v", round, err)
			}
			var n int
			if qerr := adm.QueryRowContext(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE v = %d", table, round)).Scan(&n); qerr != nil {
				t.Fatal(qerr)
			}
			switch {
			case err != nil && e.drv == "postgres":
				t.Errorf("round %d: lib/pq's statement on a connection terminated while idle failed: %v", round, err)
			case err == nil && n != 1:
				t.Errorf("round %d: the statement succeeded and ran %d times, want once", round, n)
			case err != nil && n != 0:
				t.Errorf("round %d: the statement failed (%v) and ran %d times, want none", round, err, n)
			}
			if got := c.Stats().Admitted - before.Admitted; got != 1 {
				t.Errorf("round %d: the operation was admitted %d times, want 1", round, got)
			}
			waitFor(t, "the dead connection destroyed", func() bool { return c.Stats().Pool.Closed > before.Pool.Closed })
			if now := backendPID(t, db); now == pid {
				t.Errorf("round %d: still served by terminated server process %d", round, pid)
			}
		}
	})
}

// The check that finds a dead idle connection before its next statement: it must
// cover the sockets of both drivers, and it must never wait. pgx's background reader may sit in
// a read of an idle connection's socket (it starts when a write is slow and keeps reading when
// the reply came before the write returned), holding the socket's read lock until the server
// next sends something; a check that takes that lock waits forever, with the permit held.
func TestIdleSocketCheckCoversBothDrivers(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1", func(t *testing.T, e *pgEnv) {
		backendPID(t, e.db)
		checks := false
		if sock := idleSocket(e.c); sock != nil {
			checks = sock.Checks()
		}
		if !checks && runtime.GOOS != "windows" {
			t.Errorf("the idle %s connection has no socket check: a connection killed while idle is sent its next statement", e.drv)
		}
	})
}
