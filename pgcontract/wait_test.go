package pgcontract_test

// Waits in the gate's queue and how they end: gate_queue_wait elapsing, the caller's context
// ending first, a cancel while queued, gate_queue_wait=0, FIFO order, a waiter whose context
// ended being skipped, exact counts after random cancellations, and a nested use of the gate
// that times out instead of deadlocking.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/testkit"
)

// A waiter that gets no execution permit within gate_queue_wait is refused with
// ErrAdmissionTimeout.
func TestQueueWaitElapsesWithAdmissionTimeout(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=50ms", func(t *testing.T, e *pgEnv) {
		const wait = 50 * time.Millisecond
		db, c := e.db, e.c
		h := hold(t, db)
		// Q=1: if a timed-out wait kept its admission permit, the second and third calls would be
		// refused with ErrAdmissionFull instead of waiting.
		for _, name := range []string{"Exec", "Begin", "Conn+Exec"} {
			before := c.Stats()
			start := time.Now()
			err := opNamed(name).Run(context.Background(), db)
			d := time.Since(start)
			checkGateRefusal(t, name, err, gated.ErrAdmissionTimeout)
			if d < wait || d > wait+5*time.Second {
				t.Errorf("%s: gave up after %v, want gate_queue_wait=%v", name, d, wait)
			}
			s := c.Stats()
			checkCounted(t, name, before, s, 0, 0, 1, 0)
			if s.Running != 1 || s.Waiting != 0 {
				t.Errorf("%s: after the timeout Running = %d, Waiting = %d; want 1, 0", name, s.Running, s.Waiting)
			}
		}
		h.Commit(t)
	})
}

// A context deadline shorter than gate_queue_wait ends the wait with the context's error, not
// ErrAdmissionTimeout.
func TestContextDeadlineBeforeQueueWaitReturnsTheContextError(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		db, c := e.db, e.c
		h := hold(t, db)
		for _, name := range []string{"Exec", "Begin", "Query"} {
			before := c.Stats()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			start := time.Now()
			err := opNamed(name).Run(ctx, db)
			d := time.Since(start)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || gated.IsRejected(err) || !isGateWaitCanceled(err) {
				t.Errorf("%s: got %v, want the gate's wait ended by context.DeadlineExceeded, not a rejection", name, err)
			}
			if d > 10*time.Second {
				t.Errorf("%s: returned after %v; the context's deadline was 50ms, gate_queue_wait 1m", name, d)
			}
			s := c.Stats()
			checkCounted(t, name, before, s, 0, 0, 0, 1)
			if s.Running != 1 || s.Waiting != 0 {
				t.Errorf("%s: Running = %d, Waiting = %d; want 1, 0", name, s.Running, s.Waiting)
			}
		}
		h.Commit(t)
	})
}

// Cancelling a queued caller's context returns promptly with the gate's wait ended by
// context.Canceled, and changes only Waiting and Canceled.
func TestCancelWhileQueuedReturnsPromptlyAndKeepsPermits(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		db, c := e.db, e.c
		h := hold(t, db)
		var slowest time.Duration
		for _, op := range gateOps {
			ctx, cancel := context.WithCancel(context.Background())
			done := startQueued(t, c, func() error { return op.Run(ctx, db) })
			before := c.Stats()
			start := time.Now()
			cancel()
			err := <-done
			d := time.Since(start)
			slowest = max(slowest, d)
			if !errors.Is(err, context.Canceled) || !isGateWaitCanceled(err) {
				t.Errorf("%s: got %v, want the gate's wait ended by context.Canceled", op.Name, err)
			}
			if d > time.Second {
				t.Errorf("%s: returned %v after its context was cancelled", op.Name, d)
			}
			s := c.Stats()
			if s.Running != before.Running || s.Waiting != 0 || s.Admitted != before.Admitted ||
				s.Canceled != before.Canceled+1 || s.RejectedFull != before.RejectedFull || s.RejectedTimeout != before.RejectedTimeout {
				t.Errorf("%s: before %+v, after %+v; want only Waiting -1 and Canceled +1", op.Name, before, s)
			}
		}
		t.Logf("slowest return after cancel: %v", slowest)
		h.Commit(t)
	})
}

// Waiters get the execution permit in the order they arrived.
func TestWaitersServedInArrivalOrder(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=8&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		const waiters = 8
		db, c, adm := e.db, e.c, e.adm
		// B=1 runs one statement at a time, so the serial column numbers the admissions.
		table := pgTable(t, adm, "seq bigserial PRIMARY KEY, waiter int")
		insert := "INSERT INTO " + table + " (waiter) VALUES ($1)"
		h := hold(t, db)
		var wg sync.WaitGroup
		for i := range waiters {
			before := c.Stats().Waiting
			wg.Go(func() {
				ctx := context.Background()
				if i%2 == 1 {
					if _, err := db.ExecContext(ctx, insert, i); err != nil {
						t.Errorf("waiter %d: %v", i, err)
					}
					return
				}
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				if _, err := tx.ExecContext(ctx, insert, i); err != nil {
					t.Errorf("waiter %d: %v", i, err)
				}
				if err := tx.Commit(); err != nil {
					t.Errorf("waiter %d: %v", i, err)
				}
			})
			waitFor(t, fmt.Sprintf("waiter %d queued", i), func() bool { return c.Stats().Waiting == before+1 })
		}
		h.Commit(t)
		wg.Wait()

		rows, err := adm.Query("SELECT waiter FROM " + table + " ORDER BY seq")
		if err != nil {
			t.Fatal(err)
		}
		var order []int
		for rows.Next() {
			var w int
			if err := rows.Scan(&w); err != nil {
				t.Fatal(err)
			}
			order = append(order, w)
		}
		rows.Close()
		if len(order) != waiters {
			t.Fatalf("%d of %d waiters ran: %v", len(order), waiters, order)
		}
		for i, w := range order {
			if w != i {
				t.Fatalf("waiters served in order %v, want arrival order", order)
			}
		}
	})
}

// A waiter whose context ended while it waited is skipped: the permit goes to the next waiter.
func TestWaiterWhoseContextEndedIsSkipped(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=2&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
		db, c := e.db, e.c
		h := hold(t, db)
		before := c.Stats()

		// The first waiter's context reports its end (Err) before its Done channel closes, so the
		// waiter is still asleep in the queue when the permit is released: the moment I5 is about.
		ended := testkit.NewEndedContext()
		first := beginQueued(t, db, c, ended)
		second := beginQueued(t, db, c, context.Background())
		ended.End()
		h.Commit(t)
		var r2 txResult
		select {
		case r2 = <-second:
		case r := <-first:
			if r.err == nil {
				r.tx.Rollback()
			}
			t.Fatalf("the waiter whose context ended returned (%v) before its Done closed: it was handed the permit", r.err)
		}
		if r2.err != nil {
			t.Fatalf("the next waiter did not get the permit: %v", r2.err)
		}
		select {
		case r := <-first:
			t.Fatalf("the waiter whose context ended returned (%v) before its Done closed: it was handed the permit", r.err)
		default:
		}
		if s := c.Stats(); s.Running != 1 || s.Waiting != 0 || s.Admitted != before.Admitted+1 {
			t.Errorf("after the hand-over: %+v; want Running 1, Waiting 0, Admitted +1", s)
		}
		ended.Close()
		r1 := <-first
		if r1.err == nil {
			r1.tx.Rollback()
			t.Fatal("the waiter whose context ended got a transaction")
		}
		if !errors.Is(r1.err, context.Canceled) || !isGateWaitCanceled(r1.err) {
			t.Errorf("the waiter whose context ended: got %v, want the gate's wait ended by context.Canceled", r1.err)
		}
		if s := c.Stats(); s.Canceled != before.Canceled+1 || s.Admitted != before.Admitted+1 || s.Running != 1 {
			t.Errorf("after the skipped waiter returned: %+v", s)
		}

		// The same with real contexts: the cancel races with the release that follows it.
		cur := r2.tx
		const rounds = 20
		for i := range rounds {
			ctx, cancel := context.WithCancel(context.Background())
			first := beginQueued(t, db, c, ctx)
			second := beginQueued(t, db, c, context.Background())
			cancel()
			if err := cur.Commit(); err != nil {
				t.Fatal(err)
			}
			r2, r1 := <-second, <-first
			if r2.err != nil {
				t.Fatalf("round %d: the next waiter did not get the permit: %v", i, r2.err)
			}
			if r1.err == nil {
				r1.tx.Rollback()
				t.Fatalf("round %d: the waiter whose context ended got a transaction", i)
			}
			if !errors.Is(r1.err, context.Canceled) {
				t.Errorf("round %d: the cancelled waiter: %v", i, r1.err)
			}
			cur = r2.tx
		}
		if err := cur.Commit(); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.Canceled != before.Canceled+1+rounds || s.Admitted != before.Admitted+1+rounds {
			t.Errorf("before %+v, after %+v; want Canceled and Admitted +%d", before, s, 1+rounds)
		}
	})
}

// Under random cancellations running never exceeds B nor running+waiting B+Q, and the counters
// add up exactly afterwards.
func TestCountsExactAfterRandomCancellations(t *testing.T) {
	runPG(t, "gate_max_conns=3&gate_concurrent=3&gate_queue=4&gate_queue_wait=20ms", func(t *testing.T, e *pgEnv) {
		const b, q, workers, rounds = 3, 4, 16, 15
		db, c := e.db, e.c
		before := c.Stats()

		var violations atomic.Int64
		stop := repeat(func() bool {
			if s := c.Stats(); s.Running > b || s.Running+s.Waiting > b+q {
				violations.Add(1)
			}
			time.Sleep(100 * time.Microsecond) // paces the sampling; nothing waits for it
			return true
		})

		var ok, admittedErr, full, timedOut, canceled atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
				for range rounds {
					// Three in four callers give up after 0-8ms: while queued, or while their own
					// statement runs. The others wait as long as the gate lets them.
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					if r.IntN(4) != 0 {
						ctx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(8000))*time.Microsecond)
					}
					sleep := fmt.Sprintf("SELECT pg_sleep(%.4f)", float64(r.IntN(4000))/1e6)
					// A pinned connection passes the gate exactly once per attempt, even when the
					// context ended before the call: database/sql hands it to the driver unchecked.
					conn, err := db.Conn(context.Background())
					if err != nil {
						t.Errorf("db.Conn: %v", err)
						cancel()
						return
					}
					if r.IntN(2) == 0 {
						_, err = conn.ExecContext(ctx, sleep)
					} else {
						var tx *sql.Tx
						if tx, err = conn.BeginTx(ctx, nil); err == nil {
							if _, err = tx.ExecContext(ctx, sleep); err == nil {
								err = tx.Commit()
							} else {
								tx.Rollback()
							}
						}
					}
					cancel()
					conn.Close()
					switch {
					case err == nil:
						ok.Add(1)
					case errors.Is(err, gated.ErrAdmissionFull):
						full.Add(1)
					case errors.Is(err, gated.ErrAdmissionTimeout):
						timedOut.Add(1)
					case isGateWaitCanceled(err):
						canceled.Add(1)
					default: // admitted, then failed: the context ended during the work
						admittedErr.Add(1)
					}
				}
			})
		}
		wg.Wait()
		stop()

		s := c.Stats()
		got := [4]int64{s.Admitted - before.Admitted, s.RejectedFull - before.RejectedFull,
			s.RejectedTimeout - before.RejectedTimeout, s.Canceled - before.Canceled}
		want := [4]int64{ok.Load() + admittedErr.Load(), full.Load(), timedOut.Load(), canceled.Load()}
		t.Logf("%d attempts: %d ran to the end, %d admitted then failed, %d full, %d timed out, %d canceled while queued",
			workers*rounds, ok.Load(), admittedErr.Load(), full.Load(), timedOut.Load(), canceled.Load())
		if got[0]+got[1]+got[2]+got[3] != workers*rounds {
			t.Errorf("Admitted + RejectedFull + RejectedTimeout + Canceled grew by %d for %d attempts (%+v)", got[0]+got[1]+got[2]+got[3], workers*rounds, s)
		}
		if got != want {
			t.Errorf("gate counted [admitted full timeout canceled] = %v, callers saw %v", got, want)
		}
		if want[0] == 0 || want[3] == 0 {
			t.Errorf("want both admitted callers and callers cancelled while queued, got %v", want)
		}
		if n := violations.Load(); n != 0 {
			t.Errorf("%d samples exceeded B or B+Q", n)
		}
	})
}

// A caller that already holds the only permit (inside a transaction) and uses the
// same gate again waits like anyone else and gets ErrAdmissionTimeout after gate_queue_wait,
// instead of deadlocking; the outer transaction then finishes normally.
func TestNestedUseWithOnePermitTimesOutInsteadOfDeadlock(t *testing.T) {
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
			if !errors.Is(err, gated.ErrAdmissionTimeout) {
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
