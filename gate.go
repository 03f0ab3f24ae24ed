package gated

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A gate holds the two budgets of one workload: B execution permits and B+Q admission permits.
// Waiters are served first in, first out, or with gate_queue_order=adaptive newest first while
// the queue is standing (see QueueAdaptive).
//
// Admission permits are not counted separately: an operation holds one exactly while it runs or
// waits, so admitted = running + waiting, and the B+Q limit is checked against that sum. One mutex
// guards everything, which keeps Running and Waiting exact and lets a release hand its permit (and
// its physical connection) to the first waiter in the same critical section.
type gate struct {
	gateConfig
	pool    *pool       // where a released connection goes when no waiter takes it
	wl      workloadObs // name and observability counters (observe.go)
	waiters sync.Pool   // of *waiter: per gate, so that a waiter's timer runs on its gate's clock

	mu sync.Mutex
	// The fields below are guarded by mu.
	running    int       // execution permits held, including by operations whose connection is being destroyed
	waiting    int       // waiters in the FIFO list
	head, tail *waiter   // operations waiting for an execution permit, oldest first
	standing   time.Time // when the queue last went from empty to non-empty
	closed     bool

	admitted        int64
	rejectedFull    int64
	rejectedTimeout int64
	canceled        int64
	waitDuration    time.Duration
}

// A waiter is one operation queued for an execution permit. Waiters are pooled per gate: ready is
// buffered so that a hand-over never blocks the releasing goroutine, and timer is reused across
// waits.
type waiter struct {
	ctx        context.Context
	ready      chan struct{} // receives once when granted (or when the gate closes)
	timer      *time.Timer
	start      time.Time
	prev, next *waiter

	// Guarded by gate.mu.
	granted bool      // the permit was handed over
	pc      *physConn // connection handed over with the permit, or nil
	removed bool      // taken off the list by someone else (skipped as expired, or gate closed)
	err     error     // set with removed when the gate closed
}

func newWaiter() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &waiter{ready: make(chan struct{}, 1), timer: t}
}

// The bounds of gate_queue_order=adaptive (CoDel's interval and target, Facebook's values): a
// queue that has not emptied for standingQueue is standing, and then waiting longer than
// overloadWait is refused.
const (
	standingQueue = 100 * time.Millisecond
	overloadWait  = 5 * time.Millisecond
)

// gateConfig is one gate's configuration: the default workload's or a named one's.
type gateConfig struct {
	name       string        // the workload: "default" or a name from gate_workloads
	concurrent int           // B
	queue      int           // Q
	queueWait  time.Duration // longest wait for an execution permit; 0 = try once
	adaptive   bool          // gate_queue_order=adaptive
}

func newGate(cfg gateConfig, p *pool) *gate {
	g := &gate{gateConfig: cfg, pool: p}
	g.wl.init(cfg.name)
	g.waiters.New = newWaiter
	return g
}

// acquire takes an admission permit and then an execution permit. On success the caller holds an
// execution permit and must give it back with release exactly once; pc is a physical connection
// handed over by the previous holder, or nil when the caller must take one from the pool. On
// failure nothing is held.
func (g *gate) acquire(ctx context.Context) (pc *physConn, err error) {
	if err := ctx.Err(); err != nil {
		// Checked first, so that a caller who has given up is counted as Canceled whether or
		// not a permit is free, and never takes one.
		g.mu.Lock()
		g.canceled++
		g.mu.Unlock()
		return nil, waitError(err)
	}
	g.mu.Lock()
	switch {
	case g.closed:
		g.canceled++
		g.mu.Unlock()
		return nil, ErrClosed
	case g.running+g.waiting >= g.concurrent+g.queue:
		g.rejectedFull++
		g.mu.Unlock()
		return nil, g.wl.full
	case g.running < g.concurrent && g.head == nil:
		// Nobody waits, so taking the permit cannot jump the queue.
		g.running++
		g.admitted++
		g.mu.Unlock()
		return nil, nil
	case g.queueWait <= 0:
		g.rejectedTimeout++
		g.mu.Unlock()
		return nil, g.wl.timeout
	}
	w := g.waiters.Get().(*waiter)
	w.ctx, w.start = ctx, time.Now()
	g.pushLocked(w)
	wait := g.queueWait
	g.mu.Unlock()

	w.timer.Reset(wait)
	select {
	case <-w.ready:
		w.timer.Stop()
		return g.finishWait(w)
	case <-ctx.Done():
		err = waitError(ctx.Err())
	case <-w.timer.C:
		err = g.wl.timeout
	}
	w.timer.Stop()

	g.mu.Lock()
	switch {
	case w.granted:
		// A release handed the permit over while we were leaving.
		if err == g.wl.timeout {
			g.mu.Unlock()
			<-w.ready
			return g.finishWait(w)
		}
		// The context ended: pass the permit on rather than starting work nobody waits for.
		g.admitted--
		g.canceled++
		pc := w.pc
		g.mu.Unlock()
		<-w.ready
		g.release(pc)
	case w.err != nil:
		// Woken by close, or refused by shedLocked; counted there.
		err = w.err
		g.mu.Unlock()
		<-w.ready
	default:
		// A release may already have taken us off the list because our context had ended.
		if !w.removed {
			g.removeLocked(w)
		}
		if err == g.wl.timeout {
			g.rejectedTimeout++
		} else {
			g.canceled++
		}
		g.mu.Unlock()
	}
	g.putWaiter(w)
	return nil, err
}

// finishWait returns what a woken waiter was given and recycles it.
func (g *gate) finishWait(w *waiter) (*physConn, error) {
	pc, err := w.pc, w.err
	g.putWaiter(w)
	return pc, err
}

func (g *gate) putWaiter(w *waiter) {
	*w = waiter{ready: w.ready, timer: w.timer}
	g.waiters.Put(w)
}

// waitError is the error of an operation whose context ended before it got an execution permit:
// it wraps both ErrWaitCanceled and the context's error.
func waitError(err error) error {
	return fmt.Errorf("%w: %w", ErrWaitCanceled, err)
}

// release gives back one execution permit, with the physical connection the operation used (nil
// when it was destroyed). The first waiter (with gate_queue_order=adaptive and a standing queue,
// the newest) whose context has not ended gets both directly; waiters whose context ended are
// skipped, never handed a permit (I5). Without a waiter the permit is
// returned and the connection goes back to the pool. Never blocks, except to close the connection
// when the pool is already closed.
func (g *gate) release(pc *physConn) {
	g.mu.Lock()
	// After setLimits lowered B below running, a released permit is returned, not handed over,
	// until running is within B again.
	over := g.running > g.concurrent
	newestFirst := !over && g.adaptive && g.head != nil && g.shedLocked()
	for w := g.head; w != nil && !over; w = g.head {
		if newestFirst {
			w = g.tail
		}
		g.removeLocked(w)
		if w.ctx.Err() != nil {
			w.removed = true
			continue
		}
		w.granted, w.pc = true, pc
		g.admitted++
		g.waitDuration += time.Since(w.start)
		g.mu.Unlock()
		w.ready <- struct{}{}
		return
	}
	if g.running <= 0 {
		g.mu.Unlock()
		panic("gated: execution permit released more often than acquired")
	}
	g.running--
	// Still under g.mu, so that the permit and its connection become available together: an
	// acquirer that gets this permit finds the connection idle and never waits in the pool.
	closed := pc != nil && !g.pool.put(pc)
	g.mu.Unlock()
	if closed {
		g.pool.destroy(pc)
	}
}

// setLimits changes B and Q while the gate runs (gate_fleet=on moves them to the instance's
// share). Lowering B takes no permit from a running operation: running stays above B until
// enough operations end, and their releases return their permits instead of handing them over.
// Raising B hands the new permits to waiters at once, in the same critical section, oldest first,
// skipping those whose context ended (I5). Lowering Q refuses no operation already admitted; it
// applies to the next arrivals.
func (g *gate) setLimits(b, q int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.concurrent, g.queue = b, q
	for w := g.head; w != nil && g.running < g.concurrent; w = g.head {
		g.removeLocked(w)
		if w.ctx.Err() != nil {
			w.removed = true
			continue
		}
		w.granted = true
		g.running++
		g.admitted++
		g.waitDuration += time.Since(w.start)
		w.ready <- struct{}{} // buffered: never blocks
	}
}

// withinLimits reports whether no more operations run than B allows.
func (g *gate) withinLimits() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running <= g.concurrent
}

// shedLocked is gate_queue_order=adaptive's overload rule, checked when a permit is released
// while operations wait. It reports whether the queue is standing (non-empty for standingQueue),
// and if so refuses the waiters that have waited more than overloadWait with ErrAdmissionTimeout:
// under sustained overload they would be served after most of their deadline had gone, while
// the newest waiters, served first, still have theirs.
func (g *gate) shedLocked() bool {
	now := time.Now()
	if now.Sub(g.standing) < standingQueue {
		return false
	}
	for w := g.head; w != nil && now.Sub(w.start) > overloadWait; w = g.head {
		g.removeLocked(w)
		w.removed, w.err = true, g.wl.timeout
		g.rejectedTimeout++
		w.ready <- struct{}{}
	}
	return true
}

// close makes every later acquire fail with ErrClosed and wakes the waiters with that error.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for w := g.head; w != nil; w = g.head {
		g.removeLocked(w)
		w.removed, w.err = true, ErrClosed
		g.canceled++
		w.ready <- struct{}{}
	}
}

func (g *gate) pushLocked(w *waiter) {
	if g.head == nil {
		g.standing = w.start
	}
	w.prev = g.tail
	if g.tail != nil {
		g.tail.next = w
	} else {
		g.head = w
	}
	g.tail = w
	g.waiting++
}

func (g *gate) removeLocked(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		g.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		g.tail = w.prev
	}
	w.prev, w.next = nil, nil
	g.waiting--
}

// stats fills the gate's part of s.
func (g *gate) stats(s *Stats) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s.Concurrent, s.Queue = g.concurrent, g.queue
	s.Running, s.Waiting = g.running, g.waiting
	s.Admitted = g.admitted
	s.RejectedFull = g.rejectedFull
	s.RejectedTimeout = g.rejectedTimeout
	s.Canceled = g.canceled
	s.WaitDuration = g.waitDuration
}
