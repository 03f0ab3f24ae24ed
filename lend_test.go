package gated

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newLendingSet returns web (B 2, Q 4, borrows) and batch (B 2, Q 2, lends) over one pool.
func newLendingSet() (web, batch *gate) {
	p := newPool(nil, nil, 4, 0, 0)
	web = newGate(gateConfig{name: DefaultWorkload, concurrent: 2, queue: 4, queueWait: time.Minute}, p)
	batch = newGate(gateConfig{name: "batch", concurrent: 2, queue: 2, queueWait: time.Minute}, p)
	linkLending([]*gate{web, batch}, func(g *gate) bool { return g == batch })
	return web, batch
}

func lendCounts(g *gate) (running, waiting, lent, borrowed int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running, g.waiting, g.lend.lent, g.lend.nBorrowed
}

func TestLendingIdlePermitsServeAnotherGate(t *testing.T) {
	web, batch := newLendingSet()
	for range 4 { // 2 of its own, 2 of batch's, none waits
		if _, err := web.acquire(context.Background()); err != nil {
			t.Fatalf("web acquire: %v", err)
		}
	}
	if r, w, _, b := lendCounts(web); r != 4 || w != 0 || b != 2 {
		t.Fatalf("web: running %d waiting %d borrowed %d, want 4, 0, 2", r, w, b)
	}
	if _, _, l, _ := lendCounts(batch); l != 2 {
		t.Fatalf("batch lent %d, want 2", l)
	}
	if ws, bs := gateStats(web), gateStats(batch); ws.Borrowed != 2 || bs.Lent != 2 || bs.Running != 0 {
		t.Errorf("Stats: web borrowed %d, batch lent %d and running %d; want 2, 2, 0", ws.Borrowed, bs.Lent, bs.Running)
	}
	queued := acquireAsync(t, web, context.Background()) // nothing left to borrow
	// batch's own operation waits for one borrowed operation to end, no longer.
	own := acquireAsync(t, batch, context.Background())
	web.release(nil)
	if err := <-own; err != nil {
		t.Fatalf("batch: %v", err)
	}
	if r, _, l, _ := lendCounts(batch); r != 1 || l != 1 {
		t.Errorf("batch: running %d lent %d, want 1 and 1", r, l)
	}
	// web's next release returns the other borrowed permit; batch has no waiter, so it keeps
	// serving web's queue, still lent.
	web.release(nil)
	if err := <-queued; err != nil {
		t.Fatalf("web waiter: %v", err)
	}
	if r, w, _, b := lendCounts(web); r != 3 || w != 0 || b != 1 {
		t.Errorf("web: running %d waiting %d borrowed %d, want 3, 0, 1", r, w, b)
	}
	for range 3 {
		web.release(nil)
	}
	batch.release(nil)
	for _, g := range []*gate{web, batch} {
		if r, w, l, b := lendCounts(g); r != 0 || w != 0 || l != 0 || b != 0 {
			t.Errorf("%s after quiet: running %d waiting %d lent %d borrowed %d", g.name, r, w, l, b)
		}
	}
}

func TestLendingFreedPermitServesABorrowersWaiter(t *testing.T) {
	web, batch := newLendingSet()
	mustAcquire(t, batch)
	mustAcquire(t, batch)
	mustAcquire(t, web)
	mustAcquire(t, web)
	queued := acquireAsync(t, web, context.Background())
	batch.release(nil) // batch has no waiter: the permit goes to web's
	if err := <-queued; err != nil {
		t.Fatalf("web waiter: %v", err)
	}
	if r, _, _, b := lendCounts(web); r != 3 || b != 1 {
		t.Errorf("web: running %d borrowed %d, want 3 and 1", r, b)
	}
}

func TestLendingNeverLendsFromALenderWithWaiters(t *testing.T) {
	web, batch := newLendingSet()
	mustAcquire(t, batch)
	mustAcquire(t, batch)
	own := acquireAsync(t, batch, context.Background())
	mustAcquire(t, web)
	mustAcquire(t, web)
	queued := acquireAsync(t, web, context.Background())
	batch.release(nil) // its own waiter comes first
	if err := <-own; err != nil {
		t.Fatal(err)
	}
	if _, w, _, b := lendCounts(web); w != 1 || b != 0 {
		t.Errorf("web: waiting %d borrowed %d, want 1 and 0", w, b)
	}
	batch.release(nil)
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
}

// The invariants with lending under churn, through a Connector on the fake driver: per gate,
// the permits of its own in use stay within its B; all gates together never run more than P;
// running + waiting stays within B+Q; physical connections never exceed P and nobody waits for
// one; all permits are back when quiet.
func TestLendingChurnKeepsInvariants(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=6 gate_concurrent=2 gate_queue=4 gate_queue_wait=2ms gate_workloads=batch:2:2:2ms:lend,report:2:2:2ms")
	db.SetMaxOpenConns(0)
	names := []string{"", "batch", "report"}
	var violations atomic.Int64
	var first atomic.Value
	// All gates locked at once, borrowers before the lender as the gates themselves lock, so
	// that the sum is exact.
	locked := []*gate{c.gate, c.gates["report"], c.gates["batch"]}
	check := func() {
		for _, g := range locked {
			g.mu.Lock()
		}
		total := 0
		for _, g := range locked {
			own := g.running - g.lendBalanceLocked()
			if own > g.concurrent || g.running+g.waiting > g.concurrent+g.queue || g.lend.lent < 0 || g.lend.nBorrowed < 0 {
				violations.Add(1)
				first.CompareAndSwap(nil, fmt.Sprintf("%s: running %d waiting %d lent %d borrowed %d", g.name, g.running, g.waiting, g.lend.lent, g.lend.nBorrowed))
			}
			total += g.running
		}
		for _, g := range locked {
			g.mu.Unlock()
		}
		if s := fd.Stats(); total > 6 || s.Open > 6 {
			violations.Add(1)
			first.CompareAndSwap(nil, fmt.Sprintf("running %d, open %d", total, s.Open))
		}
	}
	const workers, perWorker = 100, 100
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for range perWorker {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(5000))*time.Microsecond)
				ctx = WithWorkload(ctx, names[r.IntN(len(names))])
				var v int64
				err := db.QueryRowContext(ctx, "SELECT 1").Scan(&v)
				cancel()
				if err == nil && r.IntN(8) == 0 {
					check()
				}
			}
		})
	}
	wg.Wait()
	if n := violations.Load(); n != 0 {
		t.Errorf("%d violations; first: %v", n, first.Load())
	}
	for _, g := range locked {
		waitFor(t, "quiet", func() bool {
			r, w, l, b := lendCounts(g)
			return r == 0 && w == 0 && l == 0 && b == 0
		})
	}
	if s := c.Stats(); s.Pool.Open > 6 {
		t.Errorf("open %d > P", s.Pool.Open)
	}
}
