package pgcontract_test

// Work that goes on after the caller gave up: a cancelled or timed-out statement keeps its
// permit until the server has stopped working for it (I4), in a transaction, outside one and
// while rows are read, and a caller's timeout never releases another operation's permit.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated"
)

// A cancelStatement runs on the server until cancelled. marker is in its text, for
// pg_stat_activity.
type cancelStatement struct {
	name, sql, marker string
}

var cancelStatements = []cancelStatement{
	// Stops as soon as the server acts on the cancel request.
	{"stops at once", "SELECT pg_sleep(30)", "pg_sleep(30)"},
	// Catches the cancel and goes on working for 200ms: the caller gave up long before the
	// server stops, so a permit released on the caller's account is caught in the act.
	{"stops 200ms late", "DO $$BEGIN PERFORM pg_sleep(31); EXCEPTION WHEN query_canceled THEN PERFORM pg_sleep(0.2); END$$", "pg_sleep(31)"},
}

// A statement cancelled inside a transaction keeps its permit until the server has stopped it.
func TestCancelInTransactionKeepsPermitUntilServerStops(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c, app, adm := e.db, e.c, e.app, e.adm
		for _, st := range cancelStatements {
			ctx, cancel := context.WithCancel(context.Background())
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := tx.ExecContext(ctx, st.sql)
				done <- err
			}()
			waitFor(t, "the statement running on the server", func() bool { return activeQueries(t, adm, app, st.marker) == 1 })
			release := watchRelease(c, adm, app, st.marker)
			start := time.Now()
			cancel()
			err = <-done
			t.Logf("%s: Exec returned %v after %v", st.name, err, time.Since(start))
			checkRelease(t, release, st.marker)
			if err := tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
				t.Errorf("%s: the cancelled transaction was not rolled back by database/sql: %v", st.name, err)
			}
		}
	})
}

// A statement cancelled outside a transaction keeps its permit until the server has stopped it.
func TestCancelOutsideTransactionKeepsPermitUntilServerStops(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		db, c, app, adm := e.db, e.c, e.app, e.adm
		for _, st := range cancelStatements {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := db.ExecContext(ctx, st.sql)
				done <- err
			}()
			waitFor(t, "the statement running on the server", func() bool { return activeQueries(t, adm, app, st.marker) == 1 })
			release := watchRelease(c, adm, app, st.marker)
			start := time.Now()
			cancel()
			err := <-done
			t.Logf("Exec, %s: returned %v after %v", st.name, err, time.Since(start))
			checkRelease(t, release, st.marker)
		}

		// Rows read one by one: each row is larger than the server's 8kB send buffer, so it is sent
		// as soon as it is made, every 50ms. In the second query each row catches the cancel and
		// the query goes on: the server works on after the caller gave up, and its next rows
		// keep coming until the query ends.
		slowRow := pgFunction(t, adm, `(g int) RETURNS text LANGUAGE plpgsql AS $$
			BEGIN
				BEGIN
					PERFORM pg_sleep(0.05);
				EXCEPTION WHEN query_canceled THEN
					NULL;
				END;
				RETURN repeat('x', 9000);
			END $$`)
		for _, q := range []struct {
			name, sql, marker string
			total             int
		}{
			{"stops at once", "SELECT pg_sleep(0.05), repeat('x', 9000) FROM generate_series(1, 100)", "pg_sleep(0.05)", 100},
			{"goes on after the cancel", "SELECT " + slowRow + "(g) FROM generate_series(1, 6) g", slowRow, 6},
		} {
			ctx, cancel := context.WithCancel(context.Background())
			rows, err := db.QueryContext(ctx, q.sql)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			for i := range 3 {
				if !rows.Next() {
					t.Fatalf("rows, %s: row %d: %v", q.name, i+1, rows.Err())
				}
			}
			if s := c.Stats(); s.Running != 1 {
				t.Fatalf("rows, %s: while rows are read Running = %d, want 1", q.name, s.Running)
			}
			release := watchRelease(c, adm, app, q.marker)
			start := time.Now()
			cancel()
			n := 3
			for rows.Next() {
				n++
			}
			t.Logf("rows, %s: %d of %d read, Next stopped with %v after %v", q.name, n, q.total, rows.Err(), time.Since(start))
			if n == q.total && rows.Err() == nil {
				t.Errorf("rows, %s: cancelling the context did not end the iteration", q.name)
			}
			checkRelease(t, release, q.marker)
			rows.Close()
		}
	})
}

// A caller's timeout never releases the permit of another operation.
func TestCallerTimeoutNeverReleasesAnotherOperationsPermit(t *testing.T) {
	const b, q = 2, 4
	// P > B: a permit released too early would let a (B+1)th statement run on the server.
	runPG(t, "gate_max_conns=4&gate_concurrent=2&gate_queue=4&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		db, c, app, adm := e.db, e.c, e.app, e.adm

		// sample watches the gate and the server until stop closes; check reports what it saw.
		sample := func(minRunning int) (stop func(), check func(phase string)) {
			var bad atomic.Int64
			var firstBad atomic.Value
			stop = repeat(func() bool {
				s := c.Stats()
				var active int
				err := adm.QueryRow(`SELECT count(*) FROM pg_stat_activity
					WHERE application_name = $1 AND state = 'active'`, app).Scan(&active)
				if s.Running < minRunning || s.Running > b || s.Running+s.Waiting > b+q || active > b || err != nil {
					bad.Add(1)
					firstBad.CompareAndSwap(nil, fmt.Sprintf("running %d, waiting %d, active on the server %d, err %v", s.Running, s.Waiting, active, err))
				}
				return true
			})
			return stop, func(phase string) {
				if n := bad.Load(); n != 0 {
					t.Errorf("%s: %d samples broke the budget (running in [%d, %d], admitted <= %d, active on the server <= %d); first: %v",
						phase, n, minRunning, b, b+q, b, firstBad.Load())
				}
			}
		}

		// Phase 1: B holders keep both permits; callers queue behind them and time out.
		h1, h2 := hold(t, db), hold(t, db)
		stop, check := sample(b)
		var admittedWhileFull atomic.Int64
		var wg sync.WaitGroup
		for w := range 12 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 18))
				for i := range 4 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+r.IntN(15))*time.Millisecond)
					op := gateOps[(w+i)%len(gateOps)]
					err := op.Run(ctx, db)
					cancel()
					switch {
					case err == nil:
						admittedWhileFull.Add(1)
					case isGateWaitCanceled(err), errors.Is(err, gated.ErrAdmissionFull):
					case err == ctx.Err():
						// database/sql checks the context before it asks the driver for
						// anything and returns ctx.Err() itself: on a loaded machine a
						// deadline of a few milliseconds can pass before the call
						// reaches the gate. Every error gated returns is wrapped.
					default:
						t.Errorf("%s behind the holders: %v", op.Name, err)
					}
				}
			})
		}
		wg.Wait()
		stop()
		check("timed-out callers behind B holders")
		if n := admittedWhileFull.Load(); n != 0 {
			t.Errorf("%d callers ran while B holders held every permit", n)
		}
		if s := c.Stats(); s.Running != b || s.Waiting != 0 {
			t.Errorf("after the timed-out callers: Running = %d, Waiting = %d; want %d, 0", s.Running, s.Waiting, b)
		}
		for _, h := range []*holder{h1, h2} {
			if _, err := h.Tx.Exec("SELECT 1"); err != nil {
				t.Errorf("a holder's transaction after the timeouts: %v", err)
			}
			h.Commit(t)
		}

		// Phase 2: one long holder works on the server while callers time out, some while queued
		// and some while their own pg_sleep runs (cancelled on the server).
		long := hold(t, db)
		var longErr atomic.Value
		longStop := repeat(func() bool {
			if _, err := long.Tx.Exec("SELECT pg_sleep(0.02)"); err != nil {
				longErr.CompareAndSwap(nil, err)
				return false
			}
			return true
		})
		stop, check = sample(1)
		var inside, maxInside, ok, gaveUp atomic.Int64
		for w := range 8 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 180))
				for range 8 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+r.IntN(35))*time.Millisecond)
					sleep := fmt.Sprintf("SELECT pg_sleep(%.3f)", float64(r.IntN(30))/1000)
					var err error
					if r.IntN(2) == 0 {
						_, err = db.ExecContext(ctx, sleep)
					} else {
						var tx *sql.Tx
						if tx, err = db.BeginTx(ctx, nil); err == nil {
							storeMax(&maxInside, inside.Add(1)+1) // +1: the long holder
							_, err = tx.ExecContext(ctx, sleep)
							inside.Add(-1)
							if err == nil {
								err = tx.Commit()
							} else {
								tx.Rollback()
							}
						}
					}
					cancel()
					if err == nil {
						ok.Add(1)
					} else {
						gaveUp.Add(1)
					}
				}
			})
		}
		wg.Wait()
		stop()
		longStop()
		check("timed-out callers beside a long holder")
		t.Logf("beside the long holder: %d callers finished, %d gave up", ok.Load(), gaveUp.Load())
		if m := maxInside.Load(); m > b {
			t.Errorf("%d transactions were inside the gate at once, B=%d", m, b)
		}
		if err := longErr.Load(); err != nil {
			t.Errorf("the long holder's work failed: %v", err)
		}
		long.Commit(t)
	})
}

// A releaseSample is what watchRelease saw when the permit came back.
type releaseSample struct {
	active int // backends of the app still running the watched statement at that moment
	err    error
}

// watchRelease watches a gate that has a permit taken, from now on, and sends on the returned
// channel how many backends of app were running a statement containing marker at the moment
// Running dropped to 0. I4 wants none: a permit comes back only after the server stopped working
// for the operation that held it. It spins instead of sleeping so that the sample follows the
// release as closely as possible; start it before the caller gives up.
func watchRelease(c *gated.Connector, adm *sql.DB, app, marker string) <-chan releaseSample {
	ch := make(chan releaseSample, 1)
	go func() {
		deadline := time.Now().Add(20 * time.Second)
		for c.Stats().Running > 0 {
			if time.Now().After(deadline) {
				ch <- releaseSample{err: fmt.Errorf("the permit did not come back within 20s: %+v", c.Stats())}
				return
			}
			runtime.Gosched()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var s releaseSample
		s.err = adm.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active' AND strpos(query, $2) > 0`, app, marker).Scan(&s.active)
		ch <- s
	}()
	return ch
}

// checkRelease receives from a watchRelease channel and reports a permit that came back while
// the server still worked.
func checkRelease(t testing.TB, ch <-chan releaseSample, marker string) {
	t.Helper()
	s := <-ch
	if s.err != nil {
		t.Fatalf("watching the release: %v", s.err)
	}
	if s.active != 0 {
		t.Errorf("Running dropped to 0 while %d backends still ran %q: the permit came back before the server stopped", s.active, marker)
	}
}
