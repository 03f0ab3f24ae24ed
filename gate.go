package gated

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/gatedsql/gated/internal/fairq"
	"github.com/gatedsql/gated/internal/limiter"
)

// The invariants the gate, the pool and a call's binding keep together, named I1–I7 where the
// code relies on one:
//
//	I1  running ≤ B and running + waiting ≤ B + Q, in every gate
//	I2  physical connections open (opening, in use, idle or closing) ≤ P
//	I3  nobody waits in database/sql's own pool: a permit holder always finds a connection
//	I4  a permit comes back only once the database work it covered has ended (or its
//	    connection is closed)
//	I5  a waiter whose context has ended is skipped, never handed a permit
//	I6  no refusal or gated error reaches database/sql as driver.ErrBadConn (it would retry)
//	I7  every permit and connection is back once nothing runs
//
// Locks, in the order they may be taken (a goroutine holding one takes only those below it):
//
//  1. a borrowing gate's mu (lend.go: a gate that borrows never lends)
//  2. a lending gate's mu
//  3. the pool's mu: pool.put runs under the releasing gate's mu, so that a permit and its
//     connection become available together (I3)
//
// Leaves, never held while another lock is taken: the statement registry's, the observer's
// attachment list, the log summary's, a fleet member's and a limiter's state (guarded by its
// gate's mu). No lock is held while gated calls the inner driver, an Observer or a Logger,
// destroys a connection or blocks; the one channel send under a gate's mu, a waiter's ready, is
// buffered, and the gate's expiry timer, reset and stopped under it, runs expire on a goroutine
// of its own. A binding's fields and its physConn have one owner, the call that holds the permit,
// and need no lock.

// A gate holds the two budgets of one workload: B execution permits and B+Q admission permits.
// Waiters are served by priority, then round-robin across tenants, first in, first out within
// one (internal/fairq; see WithPriority and WithTenant), or with gate_queue_order=adaptive newest
// first within one while the queue is standing (see QueueAdaptive). When admission is full, an
// arrival may displace a waiter it comes before (fairq's Victim) instead of being refused.
//
// Admission permits are not counted separately: an operation holds one exactly while it runs or
// waits, so admitted = running + waiting, and the B+Q limit is checked against that sum. One mutex
// guards everything, which keeps Running and Waiting exact and lets a release hand its permit (and
// its physical connection) to the first waiter in the same critical section.
type gate struct {
	gateConfig
	pool    *pool       // where a released connection goes when no waiter takes it
	wl      workloadObs // name and observability counters (stats.go)
	waiters sync.Pool   // of *waiter: per gate, so that under testing/synctest a waiter's ready channel never leaves its gate's bubble
	lend    *lending    // the gate's part in lending between workloads (lend.go); nil when none lends
	expiry  *time.Timer // runs expire: ends the waits whose gate_queue_wait has passed

	mu sync.Mutex
	// The fields below are guarded by mu.
	lim        *limiter.Limit       // gate_concurrent=auto (internal/limiter), which sets concurrent; nil for a fixed B
	running    int                  // execution permits held, borrowed ones included, and by operations whose connection is being destroyed
	waiting    int                  // waiters queued
	head, tail *waiter              // operations waiting for an execution permit, oldest first: the order of their deadlines
	order      fairq.Queue[*waiter] // the same waiters, in the order they are served
	standing   time.Duration        // when the queue last went from empty to non-empty (monoNow)
	armed      bool                 // expiry will fire, at or before the head's deadline
	closed     bool

	admitted          int64
	rejectedFull      int64
	rejectedTimeout   int64
	rejectedDisplaced int64
	canceled          int64
	waitDuration      time.Duration
}

// A waiter is one operation queued for an execution permit. Waiters are pooled per gate: ready is
// buffered so that a hand-over never blocks the releasing goroutine. A waiter has no timer of its
// own: the gate's expiry ends its wait at its deadline (expire).
type waiter struct {
	ctx        context.Context
	ready      chan struct{}       // receives once when granted, refused or woken by close
	start      time.Duration       // monoNow, read under gate.mu as it is queued
	deadline   time.Duration       // start + gate_queue_wait
	prev, next *waiter             // in the gate's list, by arrival
	place      fairq.Item[*waiter] // in the gate's order of service

	// Guarded by gate.mu.
	granted bool      // the permit was handed over
	pc      *physConn // connection handed over with the permit, or nil
	removed bool      // taken off the list by someone else (skipped as ended, refused, or gate closed)
	err     error     // set with removed when refused (ErrAdmissionTimeout, ErrAdmissionDisplaced) or the gate closed
}

func newWaiter() any {
	w := &waiter{ready: make(chan struct{}, 1)}
	w.place.Value = w
	return w
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
	concurrent int           // B; with gate_concurrent=auto the current limit (guarded by gate.mu then)
	queue      int           // Q
	queueWait  time.Duration // longest wait for an execution permit; 0 = try once. Fixed once the gate is built, so that deadlines follow the queue's order (expire)
	adaptive   bool          // gate_queue_order=adaptive
}

func newGate(cfg gateConfig, p *pool) *gate {
	g := &gate{gateConfig: cfg, pool: p}
	g.wl.init(cfg.name)
	g.waiters.New = newWaiter
	g.expiry = time.AfterFunc(time.Hour, g.expire)
	g.expiry.Stop()
	return g
}

// autoLimit makes the gate's B a ceiling for gate_concurrent=auto, with min the lowest limit, when
// auto is set. The limit starts at the ceiling (internal/limiter). It is called before the gate is used.
func (g *gate) autoLimit(auto bool, min int) {
	if auto {
		g.lim = limiter.New(min, g.concurrent)
		g.concurrent = g.lim.Current()
	}
}

// acquire takes an admission permit and then an execution permit. On success the caller holds an
// execution permit and must give it back with release exactly once; pc is a physical connection
// handed over by the previous holder, or nil when the caller must take one from the pool. On
// failure nothing is held.
func (g *gate) acquire(ctx context.Context) (pc *physConn, err error) {
	var cls callClass // read from ctx only when the operation must wait or admission is full
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
		// Full: refused, unless a waiter gives way to this arrival. Someone waits only when no
		// permit is free and gate_queue_wait is set, so the arrival then queues in its place.
		if g.head != nil {
			if cls = classFrom(ctx); g.displaceLocked(cls) {
				break // to the queue
			}
		}
		g.rejectedFull++
		g.mu.Unlock()
		return nil, g.wl.full
	case g.ownFreeLocked() && g.head == nil:
		// Nobody waits, so taking the permit cannot jump the queue.
		g.running++
		g.admitted++
		g.mu.Unlock()
		return nil, nil
	case g.queueWait <= 0:
		g.rejectedTimeout++
		g.mu.Unlock()
		return nil, g.wl.timeout
	default:
		cls = classFrom(ctx)
	}
	w := g.waiters.Get().(*waiter)
	// The gate's clock is monoNow: one monotonic reading, cheaper than time.Now's two.
	w.ctx, w.start = ctx, monoNow()
	w.deadline = w.start + g.queueWait
	if w.deadline < w.start {
		w.deadline = math.MaxInt64 // a gate_queue_wait too long to add
	}
	g.pushLocked(w, cls)
	var reoffer *lending
	if g.lend != nil && g.lend.borrows() {
		// Queued first, so that a lender releasing meanwhile sees us (lend.go).
		reoffer = g.borrowForWaitersLocked()
	}
	g.mu.Unlock()
	if reoffer != nil {
		reoffer.offerToBorrowers()
	}

	// Granted, refused at the deadline (expire) or by shedLocked, and woken by close all come
	// through ready, each decided under g.mu: exactly one of them happens. A context that never
	// ends (Done is nil) leaves ready the only way out: a plain receive, cheaper than a select.
	done := ctx.Done()
	if done == nil {
		<-w.ready
		return g.finishWait(w)
	}
	select {
	case <-w.ready:
		return g.finishWait(w)
	case <-done:
		err = waitError(ctx.Err())
	}

	g.mu.Lock()
	switch {
	case w.granted:
		// A release handed the permit over while we were leaving; the context ended: pass the
		// permit on rather than starting work nobody waits for.
		g.admitted--
		g.canceled++
		pc := w.pc
		g.mu.Unlock()
		<-w.ready
		g.release(pc)
	case w.err != nil:
		// Woken by close, or refused by expire or shedLocked; counted there.
		err = w.err
		g.mu.Unlock()
		<-w.ready
	default:
		// A release or a refusal may already have taken us off the list because our context
		// had ended.
		if !w.removed {
			g.removeLocked(w)
		}
		g.canceled++
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
	*w = waiter{ready: w.ready}
	w.place.Value = w
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
//
// A permit over the current limit (gate_concurrent=auto lowered it) is returned, not handed on;
// a borrowed one goes back to its lender (lend.go).
func (g *gate) release(pc *physConn) {
	g.mu.Lock()
	g.releaseLocked(pc)
}

// releaseSample is release for an operation that ended at now (monoNow) after holding its
// connection for hold, with outcome o: the sample gate_concurrent=auto learns from, taken under
// the lock release takes anyway.
func (g *gate) releaseSample(pc *physConn, now, hold time.Duration, o outcome) {
	g.mu.Lock()
	if g.lim != nil && g.lim.Observe(now, hold, o, g.running, g.waiting) {
		g.concurrent = g.lim.Current()
	}
	g.releaseLocked(pc)
}

// releaseLocked is release with g.mu held; it unlocks it.
func (g *gate) releaseLocked(pc *physConn) {
	if g.running <= 0 {
		g.mu.Unlock()
		panic("gated: execution permit released more often than acquired")
	}
	if g.lend != nil && g.lend.nBorrowed > 0 {
		g.returnBorrowedLocked(pc) // unlocks
		return
	}
	// The releasing operation still counts in running: its permit may pass on only while the
	// running ones, it included, are within the limit.
	if g.head != nil && g.running-g.lendBalanceLocked() <= g.concurrent && g.grantLocked(pc, g.adaptive && g.shedLocked()) {
		g.grantRaisedLocked()
		g.mu.Unlock()
		return
	}
	g.running--
	g.grantRaisedLocked()
	// Still under g.mu, so that the permit and its connection become available together: an
	// acquirer that gets this permit finds the connection idle and never waits in the pool.
	closed := pc != nil && !g.pool.put(pc)
	lends := g.lend != nil && g.lend.lender && g.head == nil
	g.mu.Unlock()
	if closed {
		g.pool.destroy(pc)
	}
	if lends {
		g.lend.offerToBorrowers()
	}
}

// grantLocked hands an execution permit, with pc (nil: none), to the next waiter in the order of
// service (fairq: by priority, then tenants in turn; the newest of the tenant with newestFirst)
// whose context has not ended, and reports whether there was one. running is unchanged: the
// permit passes from one operation to the next.
func (g *gate) grantLocked(pc *physConn, newestFirst bool) bool {
	for g.head != nil {
		w := g.order.Next(newestFirst).Value
		g.unlinkLocked(w)
		if w.ctx.Err() != nil {
			w.removed = true
			continue
		}
		w.granted, w.pc = true, pc
		g.admitted++
		g.waitDuration += monoNow() - w.start
		w.ready <- struct{}{} // buffered: never blocks
		return true
	}
	return false
}

// grantRaisedLocked hands the permits a raised limit made free to waiters at once.
func (g *gate) grantRaisedLocked() {
	for g.head != nil && g.ownFreeLocked() {
		g.running++
		if !g.grantLocked(nil, false) {
			g.running--
			return
		}
	}
}

// ownFreeLocked reports whether one of the gate's own execution permits is free.
func (g *gate) ownFreeLocked() bool {
	return g.running-g.lendBalanceLocked() < g.concurrent
}

// lendBalanceLocked is the permits the gate borrowed less those it lent: running less this is
// what the gate's own permits cover.
func (g *gate) lendBalanceLocked() int {
	if g.lend == nil {
		return 0
	}
	return g.lend.nBorrowed - g.lend.lent
}

// setLimitLocked sets the current limit of a gate_concurrent=auto gate, within its bounds, and
// hands the permits a raise frees to waiters at once; a limit so set ends the cold start. Lowering
// it takes no permit from a running operation: releases return permits until running is within it.
func (g *gate) setLimitLocked(n int) {
	g.lim.Set(n)
	g.concurrent = g.lim.Current()
	g.grantRaisedLocked()
}

// setLimits changes B and Q while the gate runs (gate_fleet=on moves them to the instance's
// share); with gate_concurrent=auto, b is the limiter's ceiling and the limit is clamped to it at
// once. Lowering B takes no permit from a running operation: releases return their permits
// instead of handing them over until running is within B (releaseLocked). Raising B hands the new
// permits to waiters at once, in the same critical section (grantRaisedLocked), skipping those
// whose context ended (I5). Lowering Q refuses no operation already admitted; it applies to the
// next arrivals.
func (g *gate) setLimits(b, q int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queue = q
	if g.lim != nil {
		g.lim.SetCeiling(b)
		g.concurrent = g.lim.Current()
	} else {
		g.concurrent = b
	}
	g.grantRaisedLocked()
}

// withinLimits reports whether the operations running on the gate's own permits (those it lent
// included, those it borrowed not) are within B.
func (g *gate) withinLimits() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running-g.lendBalanceLocked() <= g.concurrent
}

// shedLocked is gate_queue_order=adaptive's overload rule, checked when a permit is released
// while operations wait. It reports whether the queue is standing (non-empty for standingQueue),
// and if so refuses the waiters that have waited more than overloadWait with ErrAdmissionTimeout:
// under sustained overload they would be served after most of their deadline had gone, while
// the newest waiters, served first, still have theirs.
func (g *gate) shedLocked() bool {
	now := monoNow()
	if now-g.standing < standingQueue {
		return false
	}
	for w := g.head; w != nil && now-w.start > overloadWait; w = g.head {
		g.refuseLocked(w, g.wl.timeout)
	}
	return true
}

// refuseLocked takes waiter w off the queue and refuses it with err, the gate's timeout or
// displacement refusal. A waiter whose context has ended is only taken off: it is leaving, and
// counts itself as canceled.
func (g *gate) refuseLocked(w *waiter, err error) {
	g.removeLocked(w)
	w.removed = true
	if w.ctx.Err() != nil {
		return
	}
	w.err = err
	if err == g.wl.displaced {
		g.rejectedDisplaced++
	} else {
		g.rejectedTimeout++
	}
	w.ready <- struct{}{}
}

// displaceLocked refuses, with ErrAdmissionDisplaced, the waiter that an arrival of class cls
// comes before in a full gate (fairq's Victim: the newest waiter of a lower priority, or of a
// tenant with more waiters), and reports whether there was one. The arrival takes its admission
// permit.
func (g *gate) displaceLocked(cls callClass) bool {
	v := g.order.Victim(cls.tenant, cls.level())
	if v == nil {
		return false
	}
	g.refuseLocked(v.Value, g.wl.displaced)
	return true
}

// expire is the expiry timer's function: it refuses, with ErrAdmissionTimeout, the waiters at the
// head of the queue whose deadline has come, and arms the timer for the next one. A waiter's
// deadline is its start, taken under g.mu as it is queued at the tail, plus queueWait, which never
// changes: deadlines grow along the queue, so the first that has not come ends the refusals.
// Taking waiters off the queue (grants, refusals, cancellations, newest first with
// gate_queue_order=adaptive) keeps that order.
func (g *gate) expire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = false
	if g.closed {
		return
	}
	now := monoNow()
	for w := g.head; w != nil && w.deadline <= now; w = g.head {
		g.refuseLocked(w, g.wl.timeout)
	}
	if g.head != nil {
		g.armLocked(g.head.deadline - now)
	}
}

// armLocked sets the expiry timer to fire after d.
func (g *gate) armLocked(d time.Duration) {
	g.armed = true
	g.expiry.Reset(d)
}

// close makes every later acquire fail with ErrClosed and wakes the waiters with that error.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	g.expiry.Stop()
	g.armed = false
	for w := g.head; w != nil; w = g.head {
		g.removeLocked(w)
		w.removed, w.err = true, ErrClosed
		g.canceled++
		w.ready <- struct{}{}
	}
}

// pushLocked queues w at the tail, and in the order of service as a waiter of class cls. The
// expiry timer is armed when it is not: otherwise it fires at or before the head's deadline, so
// before w's, and expire then arms it for the head of that time (removing waiters does not touch
// it).
func (g *gate) pushLocked(w *waiter, cls callClass) {
	if g.head == nil {
		g.standing = w.start
	}
	if !g.armed {
		g.armLocked(w.deadline - w.start) // w.start is now
	}
	w.prev = g.tail
	if g.tail != nil {
		g.tail.next = w
	} else {
		g.head = w
	}
	g.tail = w
	g.order.Push(&w.place, cls.tenant, cls.level())
	g.waiting++
	if g.lend != nil {
		g.lend.waitingHint.Add(1)
	}
}

// removeLocked takes w off the queue.
func (g *gate) removeLocked(w *waiter) {
	g.order.Remove(&w.place)
	g.unlinkLocked(w)
}

// unlinkLocked takes w, already out of the order of service, off the gate's list.
func (g *gate) unlinkLocked(w *waiter) {
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
	if g.lend != nil {
		g.lend.waitingHint.Add(-1)
	}
}

// stats fills the gate's part of s.
func (g *gate) stats(s *Stats) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s.Concurrent, s.Queue = g.concurrent, g.queue
	s.Running, s.Waiting = g.running, g.waiting
	if g.lend != nil {
		s.Lent, s.Borrowed = g.lend.lent, g.lend.nBorrowed
	}
	s.Admitted = g.admitted
	s.RejectedFull = g.rejectedFull
	s.RejectedTimeout = g.rejectedTimeout
	s.RejectedDisplaced = g.rejectedDisplaced
	s.Canceled = g.canceled
	s.WaitDuration = g.waitDuration
}

// gate_concurrent=auto's limit lives in internal/limiter; the gate holds one per auto gate
// (gate.lim) and feeds it in releaseSample. These names keep the binding's code short.

type outcome = limiter.Outcome

const (
	outcomeOK       = limiter.OK
	outcomeFailed   = limiter.Failed
	outcomeOverload = limiter.Overload
)

// outcomeOf classifies the error that ended an operation run under ctx (limiter.OutcomeOf).
func outcomeOf(ctx context.Context, err error) outcome { return limiter.OutcomeOf(ctx, err) }
