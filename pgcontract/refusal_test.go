package pgcontract_test

// Refusals under overload: with every admission permit taken, an operation is refused at once
// with ErrAdmissionFull, without a round trip to the server, counted once, never retried by
// database/sql, and without taking any permit.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated"
)

// With admission full, every kind of operation is refused at once with ErrAdmissionFull, without
// a round trip to the server.
func TestAdmissionFullRefusesAtOnceWithoutServerRoundTrip(t *testing.T) {
	const refusals = 350 // 50 of each kind of operation
	// P = B: every physical connection the gate may open is open and in a held transaction, so a
	// refusal that talked to the server would have to open a new one or touch a held one.
	runPG(t, "gate_max_conns=2&gate_concurrent=2&gate_queue=2&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		db, c, app, adm := e.db, e.c, e.app, e.adm
		h1, h2 := hold(t, db), hold(t, db)
		w1 := beginQueued(t, db, c, context.Background())
		w2 := beginQueued(t, db, c, context.Background())

		before := c.Stats()
		serverBefore := appActivity(t, adm, app)
		ctx := context.Background()
		durations := make([]time.Duration, 0, refusals)
		for i := range refusals {
			op := gateOps[i%len(gateOps)]
			start := time.Now()
			err := op.Run(ctx, db)
			durations = append(durations, time.Since(start))
			checkGateRefusal(t, op.Name, err, gated.ErrAdmissionFull)
		}
		after := c.Stats()
		serverAfter := appActivity(t, adm, app)

		med := medianDuration(durations)
		t.Logf("%d refusals: median %v, 90th percentile %v, max %v", refusals, med, durations[len(durations)*9/10], durations[len(durations)-1])
		if med >= 5*time.Millisecond {
			t.Errorf("median refusal took %v; a refusal must not wait for anything", med)
		}
		if after.RejectedFull != before.RejectedFull+refusals {
			t.Errorf("RejectedFull grew by %d for %d refusals", after.RejectedFull-before.RejectedFull, refusals)
		}
		if after.Running != 2 || after.Waiting != 2 || after.Admitted != before.Admitted {
			t.Errorf("refusals changed the gate: before %+v, after %+v", before, after)
		}
		if after.Pool != before.Pool {
			t.Errorf("refusals touched the physical pool: before %+v, after %+v", before.Pool, after.Pool)
		}
		if serverAfter != serverBefore {
			t.Errorf("refusals reached the server:\nbefore:\n%s\nafter:\n%s", serverBefore, serverAfter)
		}

		h1.Commit(t)
		h2.Commit(t)
		for _, w := range []<-chan txResult{w1, w2} {
			r := <-w
			if r.err != nil {
				t.Fatalf("queued transaction: %v", r.err)
			}
			r.tx.Commit()
		}
	})
}

// A second transaction is refused while the first holds the only execution permit.
func TestSecondTransactionRefusedWhileFirstHoldsThePermit(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c, adm := e.db, e.c, e.adm
		table := pgTable(t, adm, "id int PRIMARY KEY")
		ctx := context.Background()

		first := mustBegin(t, db)
		if _, err := first.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		_, err := db.BeginTx(ctx, nil)
		checkGateRefusal(t, "second transaction while the first holds the only permit", err, gated.ErrAdmissionFull)
		if s := c.Stats(); s.RejectedFull != 1 || s.Running != 1 || s.Waiting != 0 {
			t.Errorf("after the refusal: %+v", s)
		}
		if err := first.Commit(); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.Concurrent-s.Running != 1 {
			t.Errorf("after the first committed, %d of B=%d permits are available, want 1", s.Concurrent-s.Running, s.Concurrent)
		}
		second := mustBegin(t, db)
		if _, err := second.ExecContext(ctx, "INSERT INTO "+table+" VALUES (2)"); err != nil {
			t.Fatal(err)
		}
		if err := second.Commit(); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := adm.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil || n != 2 {
			t.Errorf("table has %d rows (%v), want both transactions' rows", n, err)
		}
	})
}

// A refusal is counted once and not retried by database/sql.
func TestRefusalIsCountedOnceAndNotRetried(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c := e.db, e.c
		ctx := context.Background()
		stmt, err := db.PrepareContext(ctx, "SELECT 1") // prepared while the permit is free
		if err != nil {
			t.Fatal(err)
		}
		defer stmt.Close()
		ops := append(slices.Clone(gateOps), namedOp{Name: "Stmt.Exec", Run: func(ctx context.Context, _ *sql.DB) error {
			_, err := stmt.ExecContext(ctx)
			return err
		}})

		h := hold(t, db)
		before := c.Stats()
		for _, op := range ops {
			n := c.Stats().RejectedFull
			err := op.Run(ctx, db)
			checkGateRefusal(t, op.Name, err, gated.ErrAdmissionFull)
			// database/sql retries a driver.ErrBadConn up to three times, each through the gate.
			if got := c.Stats().RejectedFull - n; got != 1 {
				t.Errorf("%s: one call counted %d refusals, want 1", op.Name, got)
			}
		}
		if s := c.Stats(); s.Admitted != before.Admitted || s.RejectedTimeout != 0 || s.Canceled != 0 || s.Pool != before.Pool {
			t.Errorf("refusals changed more than RejectedFull: before %+v, after %+v", before, s)
		}
		h.Commit(t)
	})
}

// A thousand refusals consume no permit.
func TestThousandRefusalsConsumeNoPermit(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		const refusals, workers = 1000, 4
		db, c := e.db, e.c
		h := hold(t, db)
		queued := beginQueued(t, db, c, context.Background())

		before := c.Stats()
		var wrong atomic.Int64
		var firstWrong atomic.Value
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := w; i < refusals; i += workers {
					if err := gateOps[i%len(gateOps)].Run(context.Background(), db); !errors.Is(err, gated.ErrAdmissionFull) {
						wrong.Add(1)
						firstWrong.CompareAndSwap(nil, fmt.Sprintf("%s: %v", gateOps[i%len(gateOps)].Name, err))
					}
				}
			})
		}
		wg.Wait()
		after := c.Stats()
		if n := wrong.Load(); n != 0 {
			t.Errorf("%d of %d calls were not refused with ErrAdmissionFull; first: %v", n, refusals, firstWrong.Load())
		}
		if after.RejectedFull != before.RejectedFull+refusals {
			t.Errorf("RejectedFull grew by %d, want %d", after.RejectedFull-before.RejectedFull, refusals)
		}
		want := before
		want.RejectedFull = after.RejectedFull
		if after != want {
			t.Errorf("refusals changed the gate or pool:\nbefore %+v\nafter  %+v", before, after)
		}

		// Both permits the refusals competed for are intact: the queued transaction gets the
		// execution permit when the holder commits.
		h.Commit(t)
		r := <-queued
		if r.err != nil {
			t.Fatalf("the queued transaction: %v", r.err)
		}
		if err := r.tx.Commit(); err != nil {
			t.Fatal(err)
		}
	})
}
