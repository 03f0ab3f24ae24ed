package pgtest

import (
	"context"
	"database/sql"
	"iter"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/testwait"
)

// Gates is what the quiet check reads of a gated connector. This package cannot import gated
// (the root package's own tests import this one), so each test package adapts *gated.Connector:
// Stats is Connector.Stats, All is Connector.AllStats, Gate is Connector.WorkloadStats, and
// WithWorkload is gated.WithWorkload.
type Gates interface {
	Stats() GateState
	All() iter.Seq2[string, GateState]
	Gate(name string) GateState
	WithWorkload(ctx context.Context, name string) context.Context
}

// GateState is the part of a gate's gated.Stats that the quiet check reads.
type GateState struct {
	Concurrent   int           // Stats.Concurrent: B
	Running      int           // Stats.Running
	Waiting      int           // Stats.Waiting
	WaitDuration time.Duration // Stats.WaitDuration
	InUse        int           // Stats.Pool.InUse
	Open         int           // Stats.Pool.Open
	MaxConns     int           // Stats.Pool.MaxConns: P
}

// Quiet reports whether no gate of g has an operation running or waiting and no physical
// connection is in use.
func Quiet(g Gates) bool {
	for _, s := range g.All() {
		if s.Running != 0 || s.Waiting != 0 || s.InUse != 0 {
			return false
		}
	}
	return true
}

// WaitIdle waits until no gate of g has anything running or waiting and no physical connection
// is in use.
func WaitIdle(t testing.TB, g Gates) {
	t.Helper()
	testwait.For(t, "every gate idle", func() bool { return Quiet(g) })
}

// CheckQuiet ends every integration test (I7: every permit back once nothing runs). It waits
// until every gate of g (the default one and each workload's) has Running = Waiting = 0 and no
// physical connection is in use, and checks that no more than P are open and that each gate
// serves a new operation. Then, gate by gate, every one of its B execution permits must be
// available at once: B transactions begin under the workload, each runs a statement, without
// anybody waiting (WaitDuration unchanged); and all come back when those transactions roll
// back. Last, I3: database/sql's own pool made sqlWaits callers wait (WaitCount), which is 0 for
// every DB from gated.Open.
func CheckQuiet(t testing.TB, db *sql.DB, g Gates, sqlWaits int64) {
	t.Helper()
	WaitIdle(t, g)
	if s := g.Stats(); s.Open > s.MaxConns {
		t.Errorf("%d physical connections open, more than P=%d", s.Open, s.MaxConns)
	}
	for name := range g.All() {
		checkGateQuiet(t, db, g, name)
	}
	testwait.For(t, "the quiet check's permits back", func() bool { return Quiet(g) })
	if w := db.Stats().WaitCount; w != sqlWaits {
		t.Errorf("database/sql WaitCount = %d, want %d: callers waited in database/sql's pool, before the gate", w, sqlWaits)
	}
}

// checkGateQuiet is CheckQuiet's check of one gate, the workload name's.
func checkGateQuiet(t testing.TB, db *sql.DB, g Gates, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(g.WithWorkload(context.Background(), name), 10*time.Second)
	defer cancel()
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Errorf("gate %s does not serve a new operation: %v", name, err)
	}
	before := g.Gate(name)
	txs := make([]*sql.Tx, 0, before.Concurrent)
	defer func() {
		for _, tx := range txs {
			tx.Rollback()
		}
	}()
	for i := range before.Concurrent {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("once quiet, permit %d of B=%d of gate %s is not available: %v", i+1, before.Concurrent, name, err)
		}
		txs = append(txs, tx)
		if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("once quiet, the connection of permit %d of B=%d of gate %s does not serve: %v", i+1, before.Concurrent, name, err)
		}
	}
	if s := g.Gate(name); s.Running != before.Concurrent || s.Waiting != 0 || s.WaitDuration != before.WaitDuration {
		t.Errorf("once quiet, B=%d transactions of gate %s did not all start at once: running %d, waiting %d, waited %v more",
			before.Concurrent, name, s.Running, s.Waiting, s.WaitDuration-before.WaitDuration)
	}
	for _, tx := range txs {
		if err := tx.Rollback(); err != nil {
			t.Errorf("rolling back the quiet check's transaction: %v", err)
		}
	}
	txs = nil
}
