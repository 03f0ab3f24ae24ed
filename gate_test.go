package gated

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatedsql/gated/internal/testkit"
	"github.com/gatedsql/gated/internal/testwait"
)

// newTestGate returns a gate over a pool that never dials: these tests release nil connections.
func newTestGate(b, q int, wait time.Duration) *gate {
	return newGate(gateConfig{name: DefaultWorkload, concurrent: b, queue: q, queueWait: wait}, newPool(nil, nil, b, 0, 0))
}

func gateStats(g *gate) Stats {
	var s Stats
	g.stats(&s)
	return s
}

// waitFor polls cond until it holds (testwait.For).
var waitFor = testwait.For

func mustAcquire(t *testing.T, g *gate) {
	t.Helper()
	if _, err := g.acquire(context.Background()); err != nil {
		t.Fatalf("acquire: %v", err)
	}
}

// acquireAsync starts an acquire and returns its result channel once the caller is queued.
func acquireAsync(t *testing.T, g *gate, ctx context.Context) <-chan error {
	t.Helper()
	done, before := startAcquire(g, ctx)
	waitFor(t, "waiter queued", func() bool { return gateStats(g).Waiting == before+1 })
	return done
}

// startAcquire starts an acquire on g in a goroutine of its own; it returns the acquire's result
// channel and how many waited before it.
func startAcquire(g *gate, ctx context.Context) (done <-chan error, before int) {
	before = gateStats(g).Waiting
	ch := make(chan error, 1)
	go func() {
		_, err := g.acquire(ctx)
		ch <- err
	}()
	return ch, before
}

// The timing tests run in a testing/synctest bubble, whose clock moves only while every goroutine
// in it waits: a duration measured there is exact, whatever the machine's load.

func TestGateRejectsAtOnceWhenAdmissionFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newTestGate(1, 1, time.Minute)
		mustAcquire(t, g)
		queued := acquireAsync(t, g, context.Background())

		start := time.Now()
		_, err := g.acquire(context.Background())
		if !errors.Is(err, ErrAdmissionFull) {
			t.Fatalf("acquire with B+Q admitted: got %v, want ErrAdmissionFull", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("refusal took %v; it must not wait for anything", d)
		}
		if s := gateStats(g); s.RejectedFull != 1 || s.Running != 1 || s.Waiting != 1 {
			t.Errorf("stats after refusal = %+v", s)
		}
		g.release(nil)
		if err := <-queued; err != nil {
			t.Fatalf("queued acquire: %v", err)
		}
		g.release(nil)
		if s := gateStats(g); s.Running != 0 || s.Waiting != 0 || s.Admitted != 2 {
			t.Errorf("final stats = %+v", s)
		}
	})
}

func TestGateServesWaitersInArrivalOrder(t *testing.T) {
	g := newTestGate(1, 5, time.Minute)
	mustAcquire(t, g)
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 5 {
		before := gateStats(g).Waiting
		wg.Go(func() {
			if _, err := g.acquire(context.Background()); err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			g.release(nil)
		})
		waitFor(t, "waiter queued", func() bool { return gateStats(g).Waiting == before+1 })
	}
	g.release(nil)
	wg.Wait()
	for i, v := range order {
		if v != i {
			t.Fatalf("service order %v, want arrival order", order)
		}
	}
}

func TestGateQueueWaitZeroNeverJumpsTheQueue(t *testing.T) {
	g := newTestGate(2, 2, time.Minute)
	mustAcquire(t, g)
	mustAcquire(t, g)
	g2 := newTestGate(2, 2, 0)
	mustAcquire(t, g2)
	if _, err := g2.acquire(context.Background()); err != nil {
		t.Fatalf("free permit with queue_wait=0: %v", err)
	}
	if _, err := g2.acquire(context.Background()); !errors.Is(err, ErrAdmissionTimeout) {
		t.Fatalf("no free permit with queue_wait=0: got %v, want ErrAdmissionTimeout", err)
	}

	// With someone waiting, a freed permit belongs to the waiter: a try-once caller arriving
	// between the release and the waiter's wake-up must not take it.
	queued := acquireAsync(t, g, context.Background())
	g.mu.Lock()
	g.queueWait = 0 // later arrivals try once
	g.mu.Unlock()
	g.release(nil)
	if _, err := g.acquire(context.Background()); !errors.Is(err, ErrAdmissionTimeout) {
		t.Fatalf("try-once acquire with a waiter served: got %v, want ErrAdmissionTimeout", err)
	}
	if err := <-queued; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

func TestGateQueueWaitElapsesWithAdmissionTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newTestGate(1, 1, 20*time.Millisecond)
		mustAcquire(t, g)
		start := time.Now()
		_, err := g.acquire(context.Background())
		if !errors.Is(err, ErrAdmissionTimeout) || !IsRejected(err) {
			t.Fatalf("got %v, want ErrAdmissionTimeout", err)
		}
		if d := time.Since(start); d != 20*time.Millisecond {
			t.Errorf("gave up after %v, want exactly gate_queue_wait (20ms)", d)
		}
		if s := gateStats(g); s.RejectedTimeout != 1 || s.Waiting != 0 || s.Running != 1 {
			t.Errorf("stats = %+v", s)
		}
	})
}

func TestGateContextDeadlineBeforeQueueWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newTestGate(1, 1, time.Minute)
		mustAcquire(t, g)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := g.acquire(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || IsRejected(err) {
			t.Fatalf("got %v, want the context's DeadlineExceeded", err)
		}
		if d := time.Since(start); d != 20*time.Millisecond {
			t.Errorf("gave up after %v, want exactly the context's deadline (20ms), before gate_queue_wait", d)
		}
		if s := gateStats(g); s.Canceled != 1 || s.Waiting != 0 {
			t.Errorf("stats = %+v", s)
		}
	})
}

func TestGateNeverHandsPermitToEndedWaiter(t *testing.T) {
	g := newTestGate(1, 2, time.Minute)
	mustAcquire(t, g)
	ctx := testkit.NewEndedContext()
	first := acquireAsync(t, g, ctx)
	second := acquireAsync(t, g, context.Background())

	ctx.End() // the first waiter is still queued and asleep
	g.release(nil)
	if err := <-second; err != nil {
		t.Fatalf("second waiter: %v", err)
	}
	select {
	case err := <-first:
		t.Fatalf("first waiter, whose context ended, returned %v before its Done closed", err)
	default:
	}
	ctx.Close()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("first waiter: got %v, want context.Canceled", err)
	}
	g.release(nil)
	if s := gateStats(g); s.Running != 0 || s.Waiting != 0 || s.Admitted != 2 || s.Canceled != 1 {
		t.Errorf("stats = %+v", s)
	}
}

// churnGate runs workers goroutines against g (B = b, Q = q), each making rounds acquires: the
// context of each is ctxOf's (drawing from the worker's random source r, seeded with its number
// and seed) with a random deadline of up to 3 ms, and each permit is held up to 200 µs. It returns
// how many times a holder saw more than b holders, or the gate's Stats more than b running or
// b+q admitted, and how many acquires were refused with ErrAdmissionDisplaced.
func churnGate(g *gate, b, q, workers, rounds int, seed uint64, ctxOf func(r *rand.Rand) context.Context) (violations, displaced int64) {
	var holders, nViolations, nDisplaced atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), seed))
			for range rounds {
				ctx, cancel := context.WithTimeout(ctxOf(r), time.Duration(r.IntN(3000))*time.Microsecond)
				_, err := g.acquire(ctx)
				cancel()
				if errors.Is(err, ErrAdmissionDisplaced) {
					nDisplaced.Add(1)
				}
				if err != nil {
					continue
				}
				if n := holders.Add(1); n > int64(b) {
					nViolations.Add(1)
				}
				if s := gateStats(g); s.Running > b || s.Running+s.Waiting > b+q {
					nViolations.Add(1)
				}
				time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
				holders.Add(-1)
				g.release(nil)
			}
		})
	}
	wg.Wait()
	return nViolations.Load(), nDisplaced.Load()
}

func TestGateCountsExactAfterRandomCancellations(t *testing.T) {
	const b, q, workers, rounds = 3, 5, 32, 200
	g := newTestGate(b, q, 5*time.Millisecond)
	violations, _ := churnGate(g, b, q, workers, rounds, 1, func(*rand.Rand) context.Context { return context.Background() })
	s := gateStats(g)
	if violations != 0 {
		t.Errorf("%d observations exceeded B or B+Q", violations)
	}
	if s.Running != 0 || s.Waiting != 0 {
		t.Errorf("after quiet: running %d, waiting %d", s.Running, s.Waiting)
	}
	if total := s.Admitted + s.RejectedFull + s.RejectedTimeout + s.Canceled; total != workers*rounds {
		t.Errorf("outcomes add up to %d, want %d (%+v)", total, workers*rounds, s)
	}
	// Every permit is back: B acquires succeed at once.
	for range b {
		mustAcquire(t, g)
	}
}

func TestGateDoubleReleasePanics(t *testing.T) {
	g := newTestGate(1, 0, 0)
	defer func() {
		if recover() == nil {
			t.Fatal("release without acquire did not panic")
		}
	}()
	g.release(nil)
}

func TestGateCloseWakesWaiters(t *testing.T) {
	g := newTestGate(1, 1, time.Minute)
	mustAcquire(t, g)
	queued := acquireAsync(t, g, context.Background())
	g.close()
	if err := <-queued; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiter after close: %v", err)
	}
	if _, err := g.acquire(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after close: %v", err)
	}
}

func TestGateUncontendedAcquireReleaseDoesNotAllocate(t *testing.T) {
	g := newTestGate(4, 4, time.Second)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		g.acquire(ctx)
		g.release(nil)
	})
	if allocs != 0 {
		t.Errorf("uncontended acquire+release allocates %v times", allocs)
	}
}

func TestGateAdaptiveServesNewestFirstAndShedsStaleWaitersOnceTheQueueStands(t *testing.T) {
	g := newGate(gateConfig{name: DefaultWorkload, concurrent: 1, queue: 10, queueWait: time.Minute, adaptive: true}, newPool(nil, nil, 1, 0, 0))
	mustAcquire(t, g)
	old := acquireAsync(t, g, context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	middle := acquireAsync(t, g, ctx)
	newest := acquireAsync(t, g, context.Background())

	// Make the queue standing and the first waiter stale without sleeping: backdate them, and
	// make the later two fresh so that this test does not depend on the machine's speed.
	g.mu.Lock()
	now := monoNow()
	g.standing = now - time.Second
	g.head.start = now - time.Second
	for w := g.head.next; w != nil; w = w.next {
		w.start = now
	}
	g.mu.Unlock()
	g.release(nil)

	if err := <-old; !errors.Is(err, ErrAdmissionTimeout) {
		t.Fatalf("stale waiter: got %v, want ErrAdmissionTimeout", err)
	}
	if err := <-newest; err != nil {
		t.Fatalf("newest waiter: %v", err)
	}
	select {
	case err := <-middle:
		t.Fatalf("middle waiter served before the newest one: %v", err)
	default:
	}
	if s := gateStats(g); s.Running != 1 || s.Waiting != 1 || s.RejectedTimeout != 1 {
		t.Errorf("stats = %+v", s)
	}
	cancel()
	if err := <-middle; !errors.Is(err, context.Canceled) {
		t.Fatalf("middle waiter: %v", err)
	}
	g.release(nil)
	if s := gateStats(g); s.Running != 0 || s.Waiting != 0 {
		t.Errorf("after quiet: %+v", s)
	}
}

func TestGateAdaptiveStaysFIFOWhileTheQueueEmpties(t *testing.T) {
	g := newGate(gateConfig{name: DefaultWorkload, concurrent: 1, queue: 10, queueWait: time.Minute, adaptive: true}, newPool(nil, nil, 1, 0, 0))
	mustAcquire(t, g)
	first := acquireAsync(t, g, context.Background())
	second := acquireAsync(t, g, context.Background())
	g.mu.Lock()
	g.standing = monoNow() // the queue formed just now, however slow this machine is
	g.mu.Unlock()
	g.release(nil)
	if err := <-first; err != nil {
		t.Fatalf("first waiter: %v", err)
	}
	g.release(nil)
	if err := <-second; err != nil {
		t.Fatalf("second waiter: %v", err)
	}
	g.release(nil)
}

// A caller whose context has already ended is counted as Canceled and gets ErrWaitCanceled
// whether or not a permit is free: on a free gate it must not be counted as Admitted.
func TestGateCountsAnEndedContextAsCanceledOnFreeAndBusyGates(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, busy := range []bool{false, true} {
		g := newTestGate(1, 1, time.Second)
		if busy {
			mustAcquire(t, g)
		}
		before := gateStats(g)
		_, err := g.acquire(ctx)
		if !errors.Is(err, ErrWaitCanceled) || !errors.Is(err, context.Canceled) {
			t.Errorf("busy=%v: acquire with an ended context: %v, want ErrWaitCanceled wrapping context.Canceled", busy, err)
		}
		s := gateStats(g)
		if s.Canceled-before.Canceled != 1 || s.Admitted != before.Admitted || s.Running != before.Running {
			t.Errorf("busy=%v: Canceled +%d, Admitted +%d, Running %d→%d; want +1, +0, unchanged",
				busy, s.Canceled-before.Canceled, s.Admitted-before.Admitted, before.Running, s.Running)
		}
	}
}
