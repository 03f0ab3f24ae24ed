package gated

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The tests of a waiter's gate_queue_wait: when it ends, and what happens at the instant it ends
// beside a release, a cancellation or the gate's close. They run in testing/synctest bubbles, where
// several events due at one instant happen in any order, and check that every order ends
// consistently: one outcome per acquire, counted once, and every permit back.

// queueAt starts an acquire on g in a bubble and returns its result once the caller is queued
// (synctest.Wait: nothing else in the bubble runs meanwhile, and the clock does not move).
func queueAt(t *testing.T, g *gate, ctx context.Context) <-chan error {
	t.Helper()
	done, before := startAcquire(g, ctx)
	synctest.Wait()
	if w := gateStats(g).Waiting; w != before+1 {
		t.Fatalf("waiting %d after queueing one, want %d", w, before+1)
	}
	return done
}

// checkQuietGate fails unless nothing runs or waits and the outcomes add up to n acquires.
func checkQuietGate(t *testing.T, g *gate, n int64) Stats {
	t.Helper()
	s := gateStats(g)
	if s.Running != 0 || s.Waiting != 0 {
		t.Errorf("after quiet: running %d, waiting %d", s.Running, s.Waiting)
	}
	if total := s.Admitted + s.RejectedFull + s.RejectedTimeout + s.Canceled; total != n {
		t.Errorf("outcomes add up to %d, want %d (%+v)", total, n, s)
	}
	return s
}

// Waiters queued at different instants, one leaving early and one served, are each refused at
// exactly their own start + gate_queue_wait, whatever became of the waiters before them.
func TestGateRefusesEachWaiterAtItsOwnDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait = 100 * time.Millisecond
		g := newTestGate(1, 8, wait)
		mustAcquire(t, g)
		t0 := time.Now()
		offsets := []time.Duration{0, 10, 20, 20, 35, 70, 130, 150} // ms after t0
		type result struct {
			err error
			at  time.Duration
		}
		results := make([]chan result, len(offsets))
		ctx0, cancel0 := context.WithCancel(context.Background())
		defer cancel0()
		for i, off := range offsets {
			time.Sleep(t0.Add(off * time.Millisecond).Sub(time.Now()))
			ctx := context.Background()
			if i == 0 {
				ctx = ctx0
			}
			results[i] = make(chan result, 1)
			go func() {
				_, err := g.acquire(ctx)
				results[i] <- result{err, time.Since(t0)}
			}()
			synctest.Wait()
			if i == 2 {
				cancel0() // the head leaves at 20ms, before its deadline
			}
		}
		// At 150ms the waiters of 0..40ms are gone; release at 160ms serves the one of 70ms,
		// and the one of 130ms is then at the head.
		time.Sleep(t0.Add(160 * time.Millisecond).Sub(time.Now()))
		g.release(nil)
		for i, off := range offsets {
			r := <-results[i]
			switch {
			case i == 0:
				if !errors.Is(r.err, context.Canceled) || r.at != 20*time.Millisecond {
					t.Errorf("waiter 0: %v at %v, want context.Canceled at 20ms", r.err, r.at)
				}
			case off == 70:
				if r.err != nil || r.at != 160*time.Millisecond {
					t.Errorf("waiter %d (queued at %dms): %v at %v, want the permit at 160ms", i, off, r.err, r.at)
				}
			default:
				want := off*time.Millisecond + wait
				if !errors.Is(r.err, ErrAdmissionTimeout) || r.at != want {
					t.Errorf("waiter %d (queued at %dms): %v at %v, want ErrAdmissionTimeout at %v", i, off, r.err, r.at, want)
				}
			}
		}
		g.release(nil) // the permit of the waiter served at 160ms
		s := checkQuietGate(t, g, int64(len(offsets))+1)
		if s.RejectedTimeout != int64(len(offsets))-2 || s.Canceled != 1 || s.Admitted != 2 {
			t.Errorf("stats = %+v, want %d refused at their deadline, 1 canceled, 2 admitted", s, len(offsets)-2)
		}
	})
}

// A release due at the very instant a waiter's gate_queue_wait ends (and, in the second case, its
// context's deadline too) may come first or last; either the waiter gets the permit or it gets its
// error, never both and never neither, and the counters say which. Every iteration starts the
// goroutines in another order, so that the bubble's scheduler tries several.
func TestGateHandOverAtTheInstantAWaitEnds(t *testing.T) {
	for _, withCtxDeadline := range []bool{false, true} {
		t.Run(fmt.Sprintf("ctxDeadline=%v", withCtxDeadline), func(t *testing.T) {
			outcomes := map[string]int{}
			for iter := range 64 {
				synctest.Test(t, func(t *testing.T) {
					const wait = 50 * time.Millisecond
					g := newTestGate(1, 2, wait)
					mustAcquire(t, g)
					ctx := context.Background()
					if withCtxDeadline {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, wait)
						defer cancel()
					}
					release := func() {
						time.Sleep(wait)
						g.release(nil)
					}
					if iter%2 == 0 {
						go release()
					}
					start := time.Now()
					done := queueAt(t, g, ctx)
					if iter%2 == 1 {
						go release()
					}
					err := <-done
					if d := time.Since(start); d != wait {
						t.Errorf("the acquire returned after %v, want %v", d, wait)
					}
					s := gateStats(g)
					switch {
					case err == nil:
						outcomes["permit"]++
						if s.Running != 1 || s.Admitted != 2 || s.RejectedTimeout+s.Canceled != 0 {
							t.Errorf("served at the instant its wait ended: %+v", s)
						}
						g.release(nil)
					case errors.Is(err, ErrAdmissionTimeout):
						outcomes["timeout"]++
						if s.RejectedTimeout != 1 || s.Admitted != 1 || s.Canceled != 0 {
							t.Errorf("refused at the instant a permit came back: %+v", s)
						}
					case errors.Is(err, context.DeadlineExceeded):
						outcomes["canceled"]++
						if s.Canceled != 1 || s.Admitted != 1 || s.RejectedTimeout != 0 {
							t.Errorf("canceled at the instant a permit came back: %+v", s)
						}
					default:
						t.Fatalf("acquire: %v", err)
					}
					synctest.Wait()
					checkQuietGate(t, g, 2)
					// Every permit is back: B acquires succeed at once.
					mustAcquire(t, g)
					g.release(nil)
				})
			}
			t.Logf("outcomes over 64 orders: %v", outcomes)
		})
	}
}

// A cancellation at the instant gate_queue_wait ends is either a cancellation or a refusal, counted
// as what the caller was told.
func TestGateCancellationRacingExpiry(t *testing.T) {
	outcomes := map[string]int{}
	for iter := range 64 {
		synctest.Test(t, func(t *testing.T) {
			const wait = 30 * time.Millisecond
			g := newTestGate(1, 4, wait)
			mustAcquire(t, g)
			var dones []<-chan error
			var cancels []context.CancelFunc
			for range 3 {
				ctx, cancel := context.WithCancel(context.Background())
				cancels = append(cancels, cancel)
				dones = append(dones, queueAt(t, g, ctx))
			}
			for i, c := range cancels {
				if (iter>>i)&1 == 0 {
					go func() { time.Sleep(wait); c() }()
				} else {
					time.AfterFunc(wait, c)
				}
			}
			var timeouts, canceled int64
			for i, d := range dones {
				switch err := <-d; {
				case errors.Is(err, ErrAdmissionTimeout):
					timeouts++
					outcomes["timeout"]++
				case errors.Is(err, context.Canceled):
					canceled++
					outcomes["canceled"]++
				default:
					t.Fatalf("waiter %d: %v", i, err)
				}
			}
			s := gateStats(g)
			if s.RejectedTimeout != timeouts || s.Canceled != canceled || s.Waiting != 0 || s.Running != 1 {
				t.Errorf("told %d timeouts and %d cancellations, counted %+v", timeouts, canceled, s)
			}
			g.release(nil)
			checkQuietGate(t, g, 4)
		})
	}
	t.Logf("outcomes over 64 orders: %v", outcomes)
}

// Closing the gate wakes every waiter with ErrClosed at once; no refusal for gate_queue_wait
// follows, and a close at the instant the first wait ends leaves each waiter one outcome.
func TestGateCloseWhileWaitersWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait = 100 * time.Millisecond
		g := newTestGate(1, 4, wait)
		mustAcquire(t, g)
		var dones []<-chan error
		for range 3 {
			dones = append(dones, queueAt(t, g, context.Background()))
			time.Sleep(10 * time.Millisecond)
		}
		start := time.Now()
		g.close()
		for i, d := range dones {
			if err := <-d; !errors.Is(err, ErrClosed) {
				t.Errorf("waiter %d after close: %v", i, err)
			}
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("close woke the waiters after %v", d)
		}
		time.Sleep(2 * wait) // past every deadline: the expiry must refuse nobody now
		g.release(nil)
		s := checkQuietGate(t, g, 4)
		if s.Canceled != 3 || s.RejectedTimeout != 0 {
			t.Errorf("stats = %+v, want 3 canceled by close", s)
		}
	})
	for iter := range 32 {
		synctest.Test(t, func(t *testing.T) {
			const wait = 40 * time.Millisecond
			g := newTestGate(1, 4, wait)
			mustAcquire(t, g)
			start := time.Now()
			closeAt := func() { time.Sleep(time.Until(start.Add(wait))); g.close() }
			if iter%2 == 0 {
				go closeAt()
			}
			first := queueAt(t, g, context.Background())
			if iter%2 == 1 {
				go closeAt()
			}
			time.Sleep(wait / 2)
			second := queueAt(t, g, context.Background())
			switch err := <-first; {
			case errors.Is(err, ErrAdmissionTimeout), errors.Is(err, ErrClosed):
			default:
				t.Fatalf("first waiter: %v", err)
			}
			if err := <-second; !errors.Is(err, ErrClosed) {
				t.Fatalf("second waiter: %v, want ErrClosed", err)
			}
			g.release(nil)
			checkQuietGate(t, g, 3)
		})
	}
}

// TestGateRandomLoadKeepsItsBudgets: many goroutines acquire and release with random holds,
// random context deadlines and random cancellations, against one gate (FIFO and adaptive order)
// or a lending pair. Whatever the order of events, running ≤ B and running + waiting ≤ B + Q at
// every look, every acquire returns once with an outcome counted as what it returned, and once
// all have returned every permit is back.
func TestGateRandomLoadKeepsItsBudgets(t *testing.T) {
	for _, mode := range []string{"fifo", "adaptive", "lending"} {
		for draw := range uint64(4) {
			t.Run(fmt.Sprintf("%s/draw=%d", mode, draw), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { randomGateLoad(t, mode, draw) })
			})
		}
	}
}

// randomGateLoad runs the load of TestGateRandomLoadKeepsItsBudgets on gates of mode; draw picks
// the random source, so that each draw is another sequence of holds, deadlines and cancellations,
// the same on every run.
func randomGateLoad(t *testing.T, mode string, draw uint64) {
	const workers, rounds, wait = 16, 100, 7 * time.Millisecond
	var gates []*gate
	switch mode {
	case "lending":
		p := newPool(nil, nil, 4, 0, 0)
		web := newGate(gateConfig{name: DefaultWorkload, concurrent: 2, queue: 4, queueWait: wait}, p)
		batch := newGate(gateConfig{name: "batch", concurrent: 2, queue: 3, queueWait: wait}, p)
		linkLending([]*gate{web, batch}, func(g *gate) bool { return g == batch })
		gates = []*gate{web, batch}
	default:
		gates = []*gate{newGate(gateConfig{name: DefaultWorkload, concurrent: 3, queue: 6, queueWait: wait, adaptive: mode == "adaptive"}, newPool(nil, nil, 3, 0, 0))}
	}
	var totalB int
	for _, g := range gates {
		totalB += g.concurrent
	}
	type tally struct{ admitted, full, timeout, canceled, n atomic.Int64 }
	tallies := make([]tally, len(gates))
	var running atomic.Int64
	var violations atomic.Int64
	var fail sync.Once
	violate := func(format string, args ...any) {
		violations.Add(1)
		fail.Do(func() { t.Errorf(format, args...) })
	}
	look := func() {
		sumRunning := 0
		for _, g := range gates {
			g.mu.Lock()
			running, w, b, q := g.running, g.waiting, g.concurrent, g.queue
			own := running - g.lendBalanceLocked() // borrowed permits count against their lender
			g.mu.Unlock()
			if own > b || running+w > b+q {
				violate("%s: running %d (on its own permits %d), waiting %d, over B %d or B+Q %d", g.name, running, own, w, b, b+q)
			}
			sumRunning += own
		}
		if sumRunning > totalB {
			violate("running %d over every B, %d", sumRunning, totalB)
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(draw, uint64(w)))
			for range rounds {
				gi := r.IntN(len(gates))
				g, tl := gates[gi], &tallies[gi]
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				switch r.IntN(4) {
				case 0:
					ctx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(10))*time.Millisecond)
				case 1:
					var c context.CancelFunc
					ctx, c = context.WithCancel(ctx)
					stop := time.AfterFunc(time.Duration(r.IntN(10))*time.Millisecond, c)
					cancel = func() { stop.Stop(); c() }
				}
				tl.n.Add(1)
				_, err := g.acquire(ctx)
				cancel()
				switch {
				case err == nil:
					tl.admitted.Add(1)
				case errors.Is(err, ErrAdmissionFull):
					tl.full.Add(1)
				case errors.Is(err, ErrAdmissionTimeout):
					tl.timeout.Add(1)
				case errors.Is(err, ErrWaitCanceled):
					tl.canceled.Add(1)
				default:
					violate("acquire: %v", err)
				}
				look()
				if err == nil {
					if n := running.Add(1); n > int64(totalB) {
						violate("%d operations hold permits, over every B (%d)", n, totalB)
					}
					time.Sleep(time.Duration(r.IntN(6000)) * time.Microsecond)
					running.Add(-1)
					g.release(nil)
				} else {
					time.Sleep(time.Duration(r.IntN(1000)) * time.Microsecond)
				}
			}
		})
	}
	wg.Wait() // an acquire that never returned would leave the bubble deadlocked
	var timeouts int64
	for i, g := range gates {
		tl := &tallies[i]
		s := checkQuietGate(t, g, tl.n.Load())
		if s.Admitted != tl.admitted.Load() || s.RejectedFull != tl.full.Load() || s.RejectedTimeout != tl.timeout.Load() || s.Canceled != tl.canceled.Load() {
			t.Errorf("%s: returned admitted %d, full %d, timeout %d, canceled %d; counted %+v", g.name,
				tl.admitted.Load(), tl.full.Load(), tl.timeout.Load(), tl.canceled.Load(), s)
		}
		if s.Lent != 0 || s.Borrowed != 0 {
			t.Errorf("%s: lent %d, borrowed %d after quiet", g.name, s.Lent, s.Borrowed)
		}
		if s.Admitted == 0 {
			t.Errorf("%s: nothing ran (%+v): the load tests nothing", g.name, s)
		}
		timeouts += s.RejectedTimeout
	}
	if timeouts == 0 {
		t.Errorf("no wait reached gate_queue_wait: the load tests nothing")
	}
	// Every permit is back: each gate's B acquires succeed at once.
	for _, g := range gates {
		for range g.concurrent {
			mustAcquire(t, g)
		}
		for range g.concurrent {
			g.release(nil)
		}
	}
	if violations.Load() > 0 {
		t.Errorf("%d violations", violations.Load())
	}
}
