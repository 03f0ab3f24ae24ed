package gated

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// A serviceLog records the names of the acquires in the order their permits were granted.
type serviceLog struct {
	mu    sync.Mutex
	order []string
}

func (l *serviceLog) add(name string) {
	l.mu.Lock()
	l.order = append(l.order, name)
	l.mu.Unlock()
}

func (l *serviceLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.order)
}

// queueNamed queues an acquire of g under ctx named name; when granted it logs name and releases
// at once. It returns the acquire's error channel.
func queueNamed(t *testing.T, g *gate, ctx context.Context, name string, log *serviceLog) <-chan error {
	t.Helper()
	before := gateStats(g).Waiting
	done := startNamed(g, ctx, name, log)
	waitFor(t, name+" queued", func() bool { return gateStats(g).Waiting == before+1 })
	return done
}

// startNamed starts an acquire of g under ctx named name; when granted it logs name and
// releases at once. It returns the acquire's error channel.
func startNamed(g *gate, ctx context.Context, name string, log *serviceLog) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := g.acquire(ctx)
		if err == nil {
			log.add(name)
			g.release(nil)
		}
		done <- err
	}()
	return done
}

// displaceWith starts an acquire of g under ctx named name that must displace a waiter, and
// returns its error channel and the displaced waiter's error, once the arrival has taken its
// place (both happen under one hold of the gate's lock).
func displaceWith(t *testing.T, g *gate, ctx context.Context, name string, log *serviceLog, victim <-chan error) (<-chan error, error) {
	t.Helper()
	done := startNamed(g, ctx, name, log)
	return done, <-victim
}

// wantServed waits for the acquires' results, each of which must be a success, and checks that
// log recorded their grants in the order want.
func wantServed(t *testing.T, log *serviceLog, want []string, dones ...<-chan error) {
	t.Helper()
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
}

func tenantCtx(tenant string) context.Context { return WithTenant(context.Background(), tenant) }

func prioCtx(p Priority) context.Context { return WithPriority(context.Background(), p) }

// A named is an acquire to queue: its name in a serviceLog and its context.
type named struct {
	name string
	ctx  context.Context
}

// queueAll queues the acquires ws on g in turn (queueNamed) and returns their error channels.
func queueAll(t *testing.T, g *gate, log *serviceLog, ws ...named) []<-chan error {
	t.Helper()
	var dones []<-chan error
	for _, w := range ws {
		dones = append(dones, queueNamed(t, g, w.ctx, w.name, log))
	}
	return dones
}

func TestGateServesHigherPriorityFirst(t *testing.T) {
	g := newTestGate(1, 5, time.Minute)
	mustAcquire(t, g)
	var log serviceLog
	dones := queueAll(t, g, &log, named{"low", prioCtx(PriorityLow)}, named{"normal1", prioCtx(PriorityNormal)},
		named{"high", prioCtx(PriorityHigh)}, named{"normal2", prioCtx(PriorityNormal)})
	g.release(nil)
	wantServed(t, &log, []string{"high", "normal1", "normal2", "low"}, dones...)
}

func TestGateServesTenantsInTurn(t *testing.T) {
	g := newTestGate(1, 8, time.Minute)
	mustAcquire(t, g)
	var log serviceLog
	var dones []<-chan error
	for _, name := range []string{"a1", "a2", "a3", "b1", "b2"} {
		dones = append(dones, queueNamed(t, g, tenantCtx(name[:1]), name, &log))
	}
	g.release(nil)
	wantServed(t, &log, []string{"a1", "b1", "a2", "b2", "a3"}, dones...)
}

// wantDisplaced checks that err is the gate's displacement refusal.
func wantDisplaced(t *testing.T, who string, err error) {
	t.Helper()
	var rj *RejectedError
	if !errors.Is(err, ErrAdmissionDisplaced) || !IsRejected(err) || !errors.As(err, &rj) || rj.Reason != RejectDisplaced || rj.Workload != DefaultWorkload {
		t.Fatalf("%s: got %v, want a *RejectedError displaced from the default workload", who, err)
	}
}

func TestGateHigherPriorityDisplacesTheNewestLowerWaiter(t *testing.T) {
	g := newTestGate(1, 2, time.Minute)
	mustAcquire(t, g)
	var log serviceLog
	low1 := queueNamed(t, g, prioCtx(PriorityLow), "low1", &log)
	low2 := queueNamed(t, g, prioCtx(PriorityLow), "low2", &log)

	high, err := displaceWith(t, g, prioCtx(PriorityHigh), "high", &log, low2)
	wantDisplaced(t, "low2", err)
	if s := gateStats(g); s.RejectedDisplaced != 1 || s.Waiting != 2 || s.Running != 1 || s.RejectedFull != 0 {
		t.Fatalf("after the high arrival: %+v", s)
	}
	// A normal arrival displaces the last low waiter; a low one then finds nobody below it.
	normal, err := displaceWith(t, g, prioCtx(PriorityNormal), "normal", &log, low1)
	wantDisplaced(t, "low1", err)
	if _, err := g.acquire(prioCtx(PriorityLow)); !errors.Is(err, ErrAdmissionFull) {
		t.Fatalf("low arrival with only higher waiters: got %v, want ErrAdmissionFull", err)
	}
	g.release(nil)
	wantServed(t, &log, []string{"high", "normal"}, high, normal)
	s := gateStats(g)
	if s.RejectedDisplaced != 2 || s.RejectedFull != 1 || s.Admitted != 3 || s.Running != 0 || s.Waiting != 0 {
		t.Fatalf("final stats %+v", s)
	}
}

func TestGateTenantWithFewerWaitersDisplacesTheNewestOfTheLargest(t *testing.T) {
	g := newTestGate(1, 3, time.Minute)
	mustAcquire(t, g)
	var log serviceLog
	n1 := queueNamed(t, g, tenantCtx("noisy"), "n1", &log)
	n2 := queueNamed(t, g, tenantCtx("noisy"), "n2", &log)
	n3 := queueNamed(t, g, tenantCtx("noisy"), "n3", &log)
	// The noisy tenant's own arrival is refused: it holds the most.
	if _, err := g.acquire(tenantCtx("noisy")); !errors.Is(err, ErrAdmissionFull) {
		t.Fatalf("noisy arrival: got %v, want ErrAdmissionFull", err)
	}
	s1, err := displaceWith(t, g, tenantCtx("small"), "s1", &log, n3)
	wantDisplaced(t, "n3", err)
	// small 1 against noisy 2: a second small arrival would only trade places.
	if _, err := g.acquire(tenantCtx("small")); !errors.Is(err, ErrAdmissionFull) {
		t.Fatalf("second small arrival: got %v, want ErrAdmissionFull", err)
	}
	// Callers without a tenant are one tenant of their own, with nobody waiting.
	none, err := displaceWith(t, g, context.Background(), "none", &log, n2)
	wantDisplaced(t, "n2", err)
	g.release(nil)
	wantServed(t, &log, []string{"n1", "s1", "none"}, n1, s1, none)
	if s := gateStats(g); s.RejectedDisplaced != 2 || s.RejectedFull != 2 || s.Running != 0 || s.Waiting != 0 {
		t.Fatalf("final stats %+v", s)
	}
}

// A waiter chosen for displacement whose context has ended is only taken off: it reports its
// own cancellation and counts as canceled; the arrival still takes its place.
func TestGateDisplacedWaiterWhoseContextEndedCountsAsCanceled(t *testing.T) {
	g := newTestGate(1, 1, time.Minute)
	mustAcquire(t, g)
	ctx, cancel := context.WithCancel(prioCtx(PriorityLow))
	leaving := acquireAsync(t, g, ctx)
	g.mu.Lock()
	cancel() // the waiter wakes and waits for the mutex
	if !g.displaceLocked(callClass{prio: PriorityHigh}) {
		g.mu.Unlock()
		t.Fatal("a high arrival displaced nobody")
	}
	g.mu.Unlock()
	if err := <-leaving; !errors.Is(err, ErrWaitCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want the waiter's own cancellation", err)
	}
	if s := gateStats(g); s.Canceled != 1 || s.RejectedDisplaced != 0 || s.Waiting != 0 {
		t.Errorf("stats = %+v, want 1 canceled, none displaced, none waiting", s)
	}
	g.release(nil)
}

// With gate_queue_order=adaptive and a standing queue, the newest waiter of the tenant whose
// turn it is is served first; the tenants still take turns.
func TestGateAdaptiveKeepsTenantsInTurn(t *testing.T) {
	g := newGate(gateConfig{name: DefaultWorkload, concurrent: 1, queue: 8, queueWait: time.Hour, adaptive: true}, newPool(nil, nil, 1, 0, 0))
	mustAcquire(t, g)
	var log serviceLog
	var dones []<-chan error
	for _, name := range []string{"a1", "a2", "b1", "b2"} {
		dones = append(dones, queueNamed(t, g, tenantCtx(name[:1]), name, &log))
	}
	g.mu.Lock()
	g.standing -= standingQueue // the queue has stood; nobody has waited past overloadWait for long
	for w := g.head; w != nil; w = w.next {
		w.start = monoNow()
	}
	g.mu.Unlock()
	g.release(nil)
	wantServed(t, &log, []string{"a2", "b2", "a1", "b1"}, dones...)
}

// TestGateInvariantsWithTenantsAndPriorities: callers of random tenants and priorities, with
// random deadlines, against a small gate: running never exceeds B nor admitted B+Q, every
// attempt ends in exactly one outcome, a displaced caller holds nothing, and every permit is
// back at the end.
func TestGateInvariantsWithTenantsAndPriorities(t *testing.T) {
	const b, q, workers, rounds = 3, 5, 32, 200
	g := newTestGate(b, q, 5*time.Millisecond)
	violations, displaced := churnGate(g, b, q, workers, rounds, 2, func(r *rand.Rand) context.Context {
		ctx := WithTenant(context.Background(), fmt.Sprint("t", r.IntN(4)))
		if r.IntN(3) == 0 {
			ctx = WithTenant(context.Background(), "")
		}
		return WithPriority(ctx, Priority(r.IntN(3)-1))
	})
	s := gateStats(g)
	if violations != 0 {
		t.Errorf("%d observations exceeded B or B+Q", violations)
	}
	if s.Running != 0 || s.Waiting != 0 || g.order.Len() != 0 {
		t.Errorf("after quiet: running %d, waiting %d, queued %d", s.Running, s.Waiting, g.order.Len())
	}
	if total := s.Admitted + s.RejectedFull + s.RejectedTimeout + s.RejectedDisplaced + s.Canceled; total != workers*rounds {
		t.Errorf("outcomes add up to %d, want %d (%+v)", total, workers*rounds, s)
	}
	if s.RejectedDisplaced != displaced || s.RejectedDisplaced == 0 {
		t.Errorf("%d displaced by Stats, %d by the callers; want equal and some", s.RejectedDisplaced, displaced)
	}
	for range b {
		mustAcquire(t, g)
	}
}

// TestInTxPassesTheGateOnceWithItsContextsPriority: InTx's BEGIN passes the gate under its
// context's priority (a high one displaces a low waiter from a full gate), and the transaction's
// statements, under whatever context, never queue again: the permit taken at BEGIN is held to
// the end, so every statement runs with the priority and tenant the transaction began with.
// TestLendingServesABorrowersWaitersInTheirOrder: a permit lent by another workload goes to the
// borrower's waiters by priority and tenant, as its own permits do.
func TestLendingServesABorrowersWaitersInTheirOrder(t *testing.T) {
	web, batch := newLendingSet()
	mustAcquire(t, batch)
	mustAcquire(t, batch)
	mustAcquire(t, web)
	mustAcquire(t, web)
	var log serviceLog
	dones := queueAll(t, web, &log, named{"low", prioCtx(PriorityLow)}, named{"a1", tenantCtx("a")}, named{"a2", tenantCtx("a")},
		named{"high", prioCtx(PriorityHigh)})
	// batch has no waiter: its freed permit is lent to web, whose waiters each release at once,
	// so that the one lent permit serves them one after another.
	batch.release(nil)
	wantServed(t, &log, []string{"high", "a1", "a2", "low"}, dones...)
	if ws, bs := gateStats(web), gateStats(batch); ws.Waiting != 0 || ws.Running != 2 || bs.Running != 1 || bs.Lent != 0 {
		t.Errorf("after: web running %d waiting %d, batch running %d lent %d; want 2, 0, 1, 0", ws.Running, ws.Waiting, bs.Running, bs.Lent)
	}
}

// TestRaisedLimitServesByPriority: permits a raise of B frees (a fleet's new share, or auto's
// limit) go to the waiters in their order, not in arrival order.
func TestRaisedLimitServesByPriority(t *testing.T) {
	g := newTestGate(1, 4, time.Minute)
	mustAcquire(t, g)
	var log serviceLog
	dones := queueAll(t, g, &log, named{"low", prioCtx(PriorityLow)}, named{"normal", prioCtx(PriorityNormal)}, named{"high", prioCtx(PriorityHigh)})
	// One permit more: each waiter served releases at once, handing it to the next.
	g.setLimits(2, 4)
	wantServed(t, &log, []string{"high", "normal", "low"}, dones...)
	if s := gateStats(g); s.Running != 1 || s.Waiting != 0 || s.Concurrent != 2 {
		t.Errorf("after: %+v; want the first permit still held, nobody waiting, B = 2", s)
	}
}

func TestInTxPassesTheGateOnceWithItsContextsPriority(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=2 gate_concurrent=1 gate_queue=1 gate_queue_wait=1m")
	held := holdPermit(t, db, fd, "h")
	low := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(WithPriority(context.Background(), PriorityLow), "SELECT 1")
		low <- err
	}()
	waitFor(t, "the low waiter queued", func() bool { return c.Stats().Waiting == 1 })

	ctx := WithTenant(WithPriority(context.Background(), PriorityHigh), "acme")
	tx := make(chan error, 1)
	go func() {
		tx <- InTx(ctx, db, nil, func(tx *sql.Tx) error {
			for _, q := range []string{"SELECT 1", "SELECT 2", "SELECT 3"} {
				// A statement under a context of another tenant and priority runs on the
				// transaction's permit all the same.
				if _, err := tx.ExecContext(WithTenant(WithPriority(context.Background(), PriorityLow), "other"), q); err != nil {
					return err
				}
			}
			return nil
		})
	}()
	wantDisplaced(t, "the low waiter", <-low)
	admitted := c.Stats().Admitted
	fd.Release("h")
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-tx; err != nil {
		t.Fatalf("InTx: %v", err)
	}
	if s := c.Stats(); s.Admitted != admitted+1 || s.RejectedDisplaced != 1 || s.Running != 0 || s.Waiting != 0 {
		t.Errorf("stats %+v: want the transaction admitted once (%d before), one displaced", s, admitted)
	}
}

// TestGateQueuedTenantAllocatesNothing: an operation of a tenant the gate has seen before, queued
// and then granted, allocates nothing: its waiter comes from the gate's pool and its tenant's
// place in the order from the queue's recycled ones.
func TestGateQueuedTenantAllocatesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{
		{"no tenant", context.Background()},
		{"tenant", WithPriority(tenantCtx("acme"), PriorityHigh)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newTestGate(1, 1, time.Hour)
			start, granted := make(chan struct{}), make(chan error)
			defer close(start)
			go func() {
				for range start {
					_, err := g.acquire(tc.ctx)
					granted <- err
				}
			}()
			queued := func() bool {
				g.mu.Lock()
				defer g.mu.Unlock()
				return g.waiting == 1
			}
			once := func() {
				mustAcquire(t, g)
				start <- struct{}{}
				// Polled by hand, with a deadline: testwait's helpers allocate.
				for deadline := time.Now().Add(time.Minute); !queued(); runtime.Gosched() {
					if time.Now().After(deadline) {
						t.Fatal("the operation never queued")
					}
				}
				g.release(nil) // to the waiter
				if err := <-granted; err != nil {
					t.Fatal(err)
				}
				g.release(nil)
			}
			once() // the waiter's and the tenant's first use
			if a := testing.AllocsPerRun(200, once); a != 0 {
				t.Errorf("a queued operation allocates %v times", a)
			}
		})
	}
}
