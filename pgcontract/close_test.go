package pgcontract_test

// db.Close with operations in flight: waiters fail with ErrClosed and are counted, running work
// finishes, and nothing is left behind on the server or in goroutines.

import (
	"context"
	"errors"
	"testing"

	"github.com/gatedsql/gated"
	"go.uber.org/goleak"
)

// db.Close with operations in flight. Waiting operations fail at once with
// ErrClosed; running ones (a statement blocked on a lock, an open transaction) finish normally;
// afterwards the server has no connection of the application left, no goroutine is left, and
// every call fails with database/sql's "sql: database is closed".
func TestCloseWithOperationsInFlightLeavesNothingBehind(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		adm := admin(t)
		table, holder := lockedRow(t, adm)
		ctx := context.Background()
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
			if err := <-waiters; !errors.Is(err, gated.ErrClosed) {
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
func TestCloseCountsTheWaitersItWakes(t *testing.T) {
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
		if err := <-waiters; !errors.Is(err, gated.ErrClosed) {
			t.Errorf("waiter at Close: %v; want ErrClosed", err)
		}
	}
	sc.Close()
	if got := gateAttempts(c); got != 3 {
		t.Errorf("Admitted + RejectedFull + RejectedTimeout + Canceled = %d for 3 attempts (1 admitted, 2 waiting at Close): %+v", got, c.Stats())
	}
}
