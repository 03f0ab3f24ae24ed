package gated

// gate_queue_wait=0 on a real server. Its second case switches a live gate's queue wait, which
// only this package can reach; pgcontract/wait_test.go holds the other waits in the gate's
// queue, through the public API.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gate_queue_wait belongs to the gate, so a gate with gate_queue_wait=0 never has a
// waiter: every caller takes a free permit or is refused at once. That is "try once"; the first
// subtest shows it. "Never jump the queue" is about callers that try once while others wait, which
// with one gate only arises when later arrivals try once and earlier ones wait; the second subtest
// makes that happen by switching the live gate's queueWait to 0 with waiters queued, as the unit
// test TestGateQueueWaitZeroNeverJumpsTheQueue does, and then shows that the hand-over from a
// committing transaction to the next waiter leaves no moment in which a try-once caller gets in.
func TestQueueWaitZeroTriesOnceAndNeverJumpsTheQueue(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		t.Run("tries once", func(t *testing.T) {
			withPG(t, "", drv, "gate_max_conns=1&gate_concurrent=1&gate_queue=2&gate_queue_wait=0", func(t *testing.T, e *pgEnv) {
				db, c := e.db, e.c
				h := hold(t, db) // a free permit is taken at once
				before := c.Stats()
				for _, op := range gateOps {
					start := time.Now()
					err := op.Run(context.Background(), db)
					// Q=2 leaves admission room: the refusal is the failed try, not ErrAdmissionFull.
					checkGateRefusal(t, op.Name, err, ErrAdmissionTimeout)
					if d := time.Since(start); d > time.Second {
						t.Errorf("%s: refused after %v; with gate_queue_wait=0 it must not wait", op.Name, d)
					}
					if s := c.Stats(); s.Waiting != 0 {
						t.Fatalf("%s: Waiting = %d with gate_queue_wait=0", op.Name, s.Waiting)
					}
				}
				if s := c.Stats(); s.RejectedTimeout != before.RejectedTimeout+int64(len(gateOps)) ||
					s.RejectedFull != before.RejectedFull || s.Admitted != before.Admitted || s.Running != 1 {
					t.Errorf("before %+v, after %+v; want RejectedTimeout +%d only", before, s, len(gateOps))
				}
				h.Commit(t)

				// Under contention nobody ever waits either.
				var maxWaiting atomic.Int64
				stop := repeat(func() bool {
					storeMax(&maxWaiting, int64(c.Stats().Waiting))
					return true
				})
				var ok, tried atomic.Int64
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						for range 20 {
							_, err := db.ExecContext(context.Background(), "SELECT 1")
							switch {
							case err == nil:
								ok.Add(1)
							case errors.Is(err, ErrAdmissionTimeout):
								tried.Add(1)
							default:
								t.Errorf("try-once caller: %v", err)
							}
						}
					})
				}
				wg.Wait()
				stop()
				t.Logf("160 try-once calls: %d ran, %d refused", ok.Load(), tried.Load())
				if n := maxWaiting.Load(); n != 0 {
					t.Errorf("Waiting reached %d with gate_queue_wait=0", n)
				}
				if s := c.Stats(); s.WaitDuration != 0 {
					t.Errorf("WaitDuration = %v with gate_queue_wait=0", s.WaitDuration)
				}
			})
		})

		t.Run("never jumps the queue", func(t *testing.T) {
			const rounds = 5
			withPG(t, "", drv, "gate_max_conns=1&gate_concurrent=1&gate_queue=2&gate_queue_wait=1m", func(t *testing.T, e *pgEnv) {
				db, c := e.db, e.c
				setQueueWait := func(d time.Duration) {
					c.gate.mu.Lock()
					c.gate.queueWait = d
					c.gate.mu.Unlock()
				}
				var jumped, tried atomic.Int64
				// hammer starts try-once callers that run until the returned stop is called (at the
				// latest at cleanup, before the DB closes).
				hammer := func() (stop func()) {
					var stops []func()
					for range 4 {
						stops = append(stops, repeat(func() bool {
							// Bounded, so that a caller that got in where it must not cannot hang
							// the test waiting for the only physical connection.
							ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
							_, err := db.ExecContext(ctx, "SELECT 1")
							cancel()
							switch {
							case err == nil:
								jumped.Add(1)
							case errors.Is(err, ErrAdmissionTimeout):
								tried.Add(1)
							default:
								t.Errorf("try-once caller neither ran nor was refused (did it get in during a hand-over?): %v", err)
								return false
							}
							return true
						}))
					}
					stop = func() {
						for _, s := range stops {
							s()
						}
					}
					t.Cleanup(stop)
					return stop
				}
				refusedMore := func() {
					t.Helper()
					n := tried.Load()
					waitFor(t, "try-once callers refused", func() bool { return tried.Load() >= n+20 })
				}

				cur := hold(t, db).Tx
				for i := range rounds {
					// One waiter queues, then arrivals try once. Running + waiting = 2 < B+Q = 3, so
					// they pass admission and are refused only for want of an execution permit.
					queued := beginQueued(t, db, c, context.Background())
					setQueueWait(0)
					stop := hammer()
					refusedMore()
					// Commit hands the only permit to the waiter, which leaves the queue empty: a
					// release that freed the permit first and let the waiter take it on waking would
					// give the try-once callers a moment to run.
					err := cur.Commit()
					r := <-queued
					refusedMore()
					stop()
					if err != nil || r.err != nil {
						t.Fatalf("round %d: Commit: %v; waiter: %v", i, err, r.err)
					}
					cur = r.tx
					setQueueWait(time.Minute)
				}
				if j := jumped.Load(); j != 0 {
					t.Errorf("%d try-once callers ran while the permit went from a committing transaction to the waiter", j)
				}
				if err := cur.Commit(); err != nil {
					t.Fatal(err)
				}
				// With nobody waiting, a try-once caller takes the free permit.
				setQueueWait(0)
				if _, err := db.ExecContext(context.Background(), "SELECT 1"); err != nil {
					t.Errorf("try-once caller with a free permit: %v", err)
				}
				t.Logf("%d try-once calls refused during %d hand-overs", tried.Load(), rounds)
			})
		})
	})
}
