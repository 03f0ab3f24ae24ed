package gated

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// A binding is a virtual connection's hold on one execution permit and the physical connection
// it serves, from bind to unbind: the permit is taken first, then a connection (handed over with
// the permit, or from the pool), and both last until database/sql takes the virtual connection
// back. While bound, every driver call on the connection is a call (call.go) that the binding's
// operations begin and end; what those calls latched (physConn's session record) decides at
// unbind whether the connection serves the next holder or is destroyed first.
//
// The binding is the only code that gives an execution permit back (the gate itself aside, which
// passes on a permit it granted to a waiter that had just left). It does so in exactly one of two
// ways, each of which ends the binding: release, with a connection ready for the next holder or
// none; or handToCleanup, when the connection is destroyed and the permit must follow the
// destroy's cleanup (the server may still run the work until then). A binding is used by one
// goroutine at a time (database/sql serializes calls on a driver connection).
type binding struct {
	// g is nil when unbound. pc may be nil while g is set, after a failed replacement of a
	// broken physical connection: the permit is still held until unbind.
	g      *gate
	pc     *physConn
	fresh  bool            // nothing that created session state ran on pc in this binding: a broken pc may be swapped
	txOpen bool            // a transaction began on pc through BeginTx and has not ended
	since  time.Duration   // when the permit was granted (monoNow), if an Observer is attached
	ctx    context.Context // the context that made the binding, for the Observer's events; nil when unbound

	// For gate_concurrent=auto (g.lim set): how long the binding waited in the gate's queue for
	// its permit, when the connection was ready (monoNow), and the worst outcome of the
	// binding's calls.
	queued  time.Duration
	readyAt time.Duration
	worst   outcome
}

// bind takes an execution permit of ctx's workload and a physical connection ready for use. On
// failure nothing is held.
func (b *binding) bind(ctx context.Context, c *Connector) error {
	g, err := c.gateFor(ctx)
	if err != nil {
		return err
	}
	start := c.obs.now()
	asked := start // with gate_concurrent=auto, when the binding asked for its permit
	if g.lim != nil && asked == 0 {
		asked = monoNow()
	}
	pc, err := g.acquire(ctx)
	b.since = c.obs.acquired(g, start, ctx, err)
	if err != nil {
		return err
	}
	if g.lim != nil {
		// The Observer's clock readings when it has them, so that the wait is timed once.
		granted := b.since
		if granted == 0 {
			granted = monoNow()
		}
		b.queued = granted - asked
	}
	b.g = g
	err = b.ready(ctx, c.pool, pc)
	c.obs.connected(g, b.since, ctx, err)
	if err != nil {
		return err // ready ended the binding
	}
	b.fresh, b.ctx = true, ctx
	if g.lim != nil {
		b.readyAt, b.worst = monoNow(), outcomeOK
	}
	return nil
}

// note records the error of one of the binding's calls under ctx for gate_concurrent=auto.
func (b *binding) note(ctx context.Context, err error) {
	if b.g == nil || b.g.lim == nil {
		return
	}
	o := outcomeOf(ctx, err)
	if o == outcomeOverload && ctx.Err() != nil && monoNow()-b.readyAt < b.queued {
		// The caller's deadline ended the operation after it had waited in the gate's queue
		// longer than it ran: the queue spent the budget, and a wait in the gate is no evidence
		// of the database's load. Its hold time is no sample of service either.
		o = outcomeFailed
	}
	b.worst = max(b.worst, o)
}

// unbind ends the binding: a physical connection that its calls left reusable goes to the next
// waiter or idle with the permit; any other is destroyed in the background, and the permit
// released after that. Never blocks.
func (b *binding) unbind(c *Connector) {
	pc := b.pc
	if b.g == nil {
		return
	}
	c.obs.held(b.g, b.since, b.ctx)
	b.ctx = nil
	if pc == nil {
		b.release(nil)
		return
	}
	pc.endLeftoverWatch()
	if b.txOpen {
		// The transaction was neither committed nor rolled back.
		b.txOpen = false
		pc.broken = true
	}
	if pc.reusable() {
		first := !pc.used
		pc.used = true
		if g := b.g; g.lim != nil {
			now, hold := b.serviceHold()
			pc.rested(now)
			worst := b.worst
			if first {
				// A new connection's first operation is no sample of the database's service
				// time: it also pays for the server starting its session (a PostgreSQL backend
				// loads its catalog caches: 30–120 ms for a 20 ms query on the loaded test
				// machine, against 24 ms for every later one), and pgx's first execution of a
				// statement prepares it. A fresh gate's first window is all such operations, and
				// the cold start took their slowness for queueing and halved the limit away from
				// a sleeping query. An operation ended by a timeout or a load refusal still
				// counts as such.
				worst = max(worst, outcomeFailed)
			}
			b.g, b.pc = nil, nil
			g.releaseSample(pc, now, hold, worst)
			return
		}
		pc.rested(monoNow())
		b.release(pc)
		return
	}
	if g := b.g; g.lim != nil {
		// The work ended by destroying the connection (a timeout that cut the socket, say):
		// still a sample, or the limiter would see only the operations that survived. Its whole
		// hold: what last arrived on a socket given up mid-operation says nothing of when the
		// database finished.
		now, worst := monoNow(), max(b.worst, outcomeFailed)
		hold := now - b.readyAt
		b.g, b.pc = nil, nil
		c.pool.destroyAsync(pc, func() { g.releaseSample(nil, monoNow(), hold, worst) })
		return
	}
	c.pool.destroyAsync(pc, b.handToCleanup())
}

// serviceHold returns the end of the binding's hold (monoNow) and the hold time that
// gate_concurrent=auto learns from: the time from the connection being ready to now, less the
// client's own wait after the database's last answer arrived, as far as the kernel can tell it
// (physConn.answerAge; see clientWait for the bounds). Call it before unbind clears b.pc, only for
// a gate with a limiter: a hold longer than the kernel's step costs a system call (getsockopt,
// on Linux over TCP), a shorter one nothing.
//
// What the subtraction removes is time the database had finished: the answer's goroutine waiting
// for a core (on a loaded client machine the answer can sit in the socket for tens of
// milliseconds, which the limiter would take for queueing in the database and fall, curing
// nothing), and the application's own time after the last packet, reading the rows slowly or
// working before it gives the connection back. Both are the client's, not the database's, and the
// limiter, which judges the database's queueing, must not see them. The time before the last
// packet stays: a result that is read slowly holds up the server (its socket buffers fill) and
// that is part of the hold.
func (b *binding) serviceHold() (now, hold time.Duration) {
	now = monoNow()
	hold = now - b.readyAt
	if hold <= recvAgeStep(0) {
		// Nothing the kernel can resolve could be taken off (clientWait): no system call. Fast
		// operations, SELECT 1 and its like, pay nothing for the subtraction.
		return now, hold
	}
	age := b.pc.answerAge()
	step := recvAgeStep(age) // from the age as the kernel reported it, in its steps
	if age > 0 {
		// Read after now: the time since now is not the client's wait within the hold.
		age = max(age-(monoNow()-now), 0)
	}
	return now, hold - clientWait(hold, age, step)
}

// clientWait returns how much of hold to take off, given that the server's last data arrived age
// ago (0: unknown) as reported in steps of step, which may exceed the true age by up to one step:
// age less one step, so that the sample never falls below the time the answer truly took; and
// never more than hold less one step, for a connection whose last data arrived before the
// operation began (a binding that never reached the server): the sample stays at least a step,
// the least time the kernel can resolve, or the whole hold when it is shorter than a step. An
// age within one step takes nothing off.
func clientWait(hold, age, step time.Duration) time.Duration {
	if age <= step || hold <= step {
		return 0
	}
	return min(age, hold) - step
}

// maxRecvAgeStep is Linux's coarsest tick, 10 ms at HZ=100 (the lowest HZ the kernel offers:
// 100, 250, 300, 1000): the step assumed until a finer one is seen.
const maxRecvAgeStep = 10 * time.Millisecond

// recvAgeStepSeen is the shortest non-zero age any socket of the process reported (ns), 0 until
// one did.
var recvAgeStepSeen atomic.Int64

// recvAgeStep returns the step in which the kernel reports ages, having seen age: the shortest
// non-zero age seen so far, at most maxRecvAgeStep. The kernel reports whole jiffies, rounded up
// to milliseconds, so no non-zero age is shorter than one jiffy: the shortest seen is at least the
// true step, and it reaches it once an answer is read a tick after it arrived (4 ms at HZ=250,
// as on Debian's kernels; 1 ms at HZ=1000). Racing stores may keep a longer one for a while:
// every candidate is a reported age, so each is safe.
func recvAgeStep(age time.Duration) time.Duration {
	step := time.Duration(recvAgeStepSeen.Load())
	if step == 0 {
		step = maxRecvAgeStep
	}
	if age > 0 && age < step {
		recvAgeStepSeen.Store(int64(age))
		step = age
	}
	return step
}

// release ends the binding and gives its permit back, with pc, a connection ready for the next
// holder, or nil.
func (b *binding) release(pc *physConn) {
	g := b.g
	b.g, b.pc = nil, nil
	g.release(pc)
}

// handToCleanup ends the binding and returns the function that the cleanup of its connection's
// destroy calls when it has ended: the permit is given back then, once the server's work on the
// connection has ended (I4). It allocates, on this path only.
func (b *binding) handToCleanup() func() {
	g := b.g
	b.g, b.pc = nil, nil
	return func() { g.release(nil) }
}

// ready gives the binding a physical connection: pc when one was handed over with the permit,
// otherwise one from the pool; a used connection is first reset with the driver's ResetSession.
// A connection that fails its reset is destroyed (see destroyWithin) and another taken, so the
// caller never sees its driver.ErrBadConn. The loop ends because only used connections are reset
// and there are finitely many of them: a new connection either works or fails to open.
//
// On error the binding has ended: the permit was given back, or handed to a cleanup that gives
// it back when it ends.
func (b *binding) ready(ctx context.Context, p *pool, pc *physConn) error {
	for {
		if pc == nil {
			var err error
			if pc, err = p.get(ctx); err != nil {
				b.release(nil)
				return err
			}
		}
		if err := ctx.Err(); err != nil {
			// Admitted as the caller gave up: a reset under this context would fail and condemn
			// a healthy connection.
			b.release(pc)
			return fmt.Errorf("gated: the context ended before the operation started: %w", err)
		}
		err := pc.reset(ctx, p.checkRest)
		if err == nil {
			b.pc = pc
			return nil
		}
		if callerEnded(ctx, err) {
			p.checkCanceled(ctx, pc, err) // the caller's deadline cut the check short: not dead
		} else {
			pc.closedFor = CloseDeadIdle
		}
		if !b.destroyWithin(ctx, p, pc) {
			return fmt.Errorf("gated: a pooled connection failed its check before reuse (%v), and the context ended while it was closed: %w", err, ctx.Err())
		}
		pc = nil
	}
}

// replace destroys the binding's broken physical connection, which failed with cause before
// anything reached the server, and gives it another, keeping the permit. The destroy finishes
// first (the permit follows the cleanup, I4); when ctx ends before it does, the permit goes to
// the cleanup, the binding ends, and replace returns the context's error.
func (b *binding) replace(ctx context.Context, p *pool, cause error) error {
	old := b.pc
	b.pc = nil
	old.closedFor = deadReason(ctx, cause)
	if !b.destroyWithin(ctx, p, old) {
		return fmt.Errorf("gated: the context ended while a failed connection was closed: %w", ctx.Err())
	}
	return b.ready(ctx, p, nil)
}

// destroyWithin destroys pc, a connection the binding can no longer use, and waits for the
// cleanup, so that the permit follows it (I4) and the pool slot pc held is free for the
// replacement: with P = B a destroy in the background would leave a permit holder waiting in
// the pool, invisible in Stats and unbounded by gate_queue_wait. When ctx ends first it
// reports false and the binding has ended: the cleanup, which goes on, gives the permit back
// when it ends.
func (b *binding) destroyWithin(ctx context.Context, p *pool, pc *physConn) bool {
	const (
		waiting = iota
		destroyed
		leftToCleanup
	)
	var state atomic.Int32
	done := make(chan struct{})
	g := b.g
	p.destroyAsync(pc, func() {
		if state.CompareAndSwap(waiting, destroyed) {
			close(done)
		} else {
			g.release(nil) // the binding handed its permit to this cleanup
		}
	})
	select {
	case <-done:
		return true
	case <-ctx.Done():
		if state.CompareAndSwap(waiting, leftToCleanup) {
			b.g, b.pc = nil, nil
			return false
		}
		return true
	}
}
