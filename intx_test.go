package gated

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gatedsql/gated/internal/drivers"
	"github.com/gatedsql/gated/internal/faultproxy"
)

// withProxiedPG is withPG for each driver on the test server reached through a fault-injection
// proxy.
func withProxiedPG(t *testing.T, params string, body func(t *testing.T, e *pgEnv, p *faultproxy.Proxy)) {
	forEachDriver(t, func(t *testing.T, drv string) {
		p, base := proxied(t)
		withPG(t, base, drv, params, func(t *testing.T, e *pgEnv) { body(t, e, p) })
	})
}

var errFn = errors.New("fn failed")

func TestInTxRollsBackAndReturnsFnError(t *testing.T) {
	runPG(t, "gate_max_conns=2", func(t *testing.T, e *pgEnv) {
		table := pgTable(t, e.adm, "id int primary key")
		err := InTx(context.Background(), e.db, nil, func(tx *sql.Tx) error {
			if _, err := tx.Exec("INSERT INTO " + table + " VALUES (1)"); err != nil {
				return err
			}
			return errFn
		})
		if err != errFn {
			t.Errorf("InTx = %v, want fn's error unchanged", err)
		}
		if n := countRows(t, e.adm, table); n != 0 {
			t.Errorf("%d rows after fn failed, want 0 (rolled back)", n)
		}
	})
}

func TestInTxAttachesAFailedRollback(t *testing.T) {
	withProxiedPG(t, "gate_max_conns=2", func(t *testing.T, e *pgEnv, p *faultproxy.Proxy) {
		err := InTx(context.Background(), e.db, nil, func(tx *sql.Tx) error {
			if _, err := tx.Exec("SELECT 1"); err != nil {
				return err
			}
			p.Arm(faultproxy.Rule{Match: []byte("rollback"), Fold: true, When: faultproxy.BeforeRequest, How: faultproxy.RST})
			return errFn
		})
		var rb *rollbackError
		if !errors.Is(err, errFn) || !errors.As(err, &rb) || !errors.Is(err, rb.rollback) || !strings.Contains(err.Error(), "rollback failed") {
			t.Fatalf("InTx with a failing rollback = %v, want fn's error and the rollback's, both found by errors.Is", err)
		}
		t.Logf("InTx: %v", err)
	})
}

func TestInTxRollsBackOnPanicWithPermitsBack(t *testing.T) {
	runPG(t, "gate_max_conns=2", func(t *testing.T, e *pgEnv) {
		table := pgTable(t, e.adm, "id int primary key")
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Errorf("recovered %v, want the panic of fn", r)
				}
			}()
			InTx(context.Background(), e.db, nil, func(tx *sql.Tx) error {
				if _, err := tx.Exec("INSERT INTO " + table + " VALUES (1)"); err != nil {
					return err
				}
				panic("boom")
			})
		}()
		if s := e.c.Stats(); s.Running != 0 {
			t.Errorf("running %d after InTx panicked, want every permit back", s.Running)
		}
		if n := countRows(t, e.adm, table); n != 0 {
			t.Errorf("%d rows after fn panicked, want 0", n)
		}
	})
}

func TestInTxCommitCutAfterSendingIsUnknownAndNotRetried(t *testing.T) {
	withProxiedPG(t, "gate_max_conns=2", func(t *testing.T, e *pgEnv, p *faultproxy.Proxy) {
		table := pgTable(t, e.adm, "id int primary key")
		var calls atomic.Int64
		err := InTx(context.Background(), e.db, &TxOptions{Retries: 3}, func(tx *sql.Tx) error {
			calls.Add(1)
			if _, err := tx.Exec("INSERT INTO " + table + " VALUES (1)"); err != nil {
				return err
			}
			p.Arm(faultproxy.Rule{Match: []byte("commit"), Fold: true, When: faultproxy.AfterResponse, How: faultproxy.RST})
			return nil
		})
		if !errors.Is(err, ErrCommitUnknown) {
			t.Fatalf("InTx with the COMMIT's answer cut = %v, want ErrCommitUnknown", err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("fn ran %d times, want 1: a commit is never retried", n)
		}
		if n := countRows(t, e.adm, table); n != 1 {
			t.Errorf("%d rows: the server committed, want 1", n)
		}
	})
}

// The connection dies before COMMIT is written: gated sees the reset socket before it sends
// anything, so the transaction certainly did not commit and the error is not ErrCommitUnknown.
func TestInTxCommitCutBeforeSendingIsNotUnknown(t *testing.T) {
	withProxiedPG(t, "gate_max_conns=2", func(t *testing.T, e *pgEnv, p *faultproxy.Proxy) {
		table := pgTable(t, e.adm, "id int primary key")
		var calls atomic.Int64
		err := InTx(context.Background(), e.db, &TxOptions{Retries: 3}, func(tx *sql.Tx) error {
			calls.Add(1)
			if _, err := tx.Exec("INSERT INTO " + table + " VALUES (1)"); err != nil {
				return err
			}
			p.CutAll(faultproxy.RST)
			waitFor(t, "the proxy's connections cut", func() bool { return p.Conns() == 0 })
			return nil
		})
		if err == nil || errors.Is(err, ErrCommitUnknown) {
			t.Fatalf("InTx with the connection cut before COMMIT was sent = %v, want a failure that is not ErrCommitUnknown", err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("fn ran %d times, want 1: a commit is never retried", n)
		}
		if n := countRows(t, e.adm, table); n != 0 {
			t.Errorf("%d rows after a COMMIT that never reached the server, want 0", n)
		}
	})
}

// COMMIT left the process and the network lost it before the server: the client cannot tell
// this from a lost answer, so the outcome is unknown (here: not committed).
func TestInTxCommitLostOnTheWayIsUnknown(t *testing.T) {
	withProxiedPG(t, "gate_max_conns=2", func(t *testing.T, e *pgEnv, p *faultproxy.Proxy) {
		table := pgTable(t, e.adm, "id int primary key")
		err := InTx(context.Background(), e.db, nil, func(tx *sql.Tx) error {
			if _, err := tx.Exec("INSERT INTO " + table + " VALUES (1)"); err != nil {
				return err
			}
			p.Arm(faultproxy.Rule{Match: []byte("commit"), Fold: true, When: faultproxy.BeforeRequest, How: faultproxy.RST})
			return nil
		})
		if !errors.Is(err, ErrCommitUnknown) {
			t.Fatalf("InTx with COMMIT sent and lost by the network = %v, want ErrCommitUnknown", err)
		}
		if n := countRows(t, e.adm, table); n != 0 {
			t.Errorf("%d rows after a COMMIT that never reached the server, want 0", n)
		}
	})
}

func TestInTxRetriesSerializationFailuresThroughTheGate(t *testing.T) {
	runPG(t, "gate_max_conns=2", func(t *testing.T, e *pgEnv) {
		for _, code := range []string{"40001", "40P01"} {
			raise := "DO $$ BEGIN RAISE EXCEPTION 'simulated' USING ERRCODE = '" + code + "'; END $$"
			var calls atomic.Int64
			before := e.c.Stats().Admitted
			err := InTx(context.Background(), e.db, &TxOptions{Retries: 3}, func(tx *sql.Tx) error {
				if calls.Add(1) <= 2 {
					_, err := tx.Exec(raise)
					return err
				}
				_, err := tx.Exec("SELECT 1")
				return err
			})
			if err != nil {
				t.Errorf("%s: InTx with two failures and three retries: %v", code, err)
			}
			if n, admitted := calls.Load(), e.c.Stats().Admitted-before; n != 3 || admitted != 3 {
				t.Errorf("%s: fn ran %d times and the gate admitted %d, want 3 and 3", code, n, admitted)
			}

			calls.Store(0)
			err = InTx(context.Background(), e.db, nil, func(tx *sql.Tx) error {
				calls.Add(1)
				_, err := tx.Exec(raise)
				return err
			})
			if drivers.SQLState(err) != code || calls.Load() != 1 {
				t.Errorf("%s without retries: %v after %d runs, want the server's error after 1", code, err, calls.Load())
			}
		}
	})
}
