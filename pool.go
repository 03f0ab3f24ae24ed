package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatedsql/gated/internal/drivers"
	"github.com/gatedsql/gated/internal/sockconn"
)

// leftDialWait bounds how long a dial goes on after the caller that started it left (see dial).
const leftDialWait = 15 * time.Second

// A pool owns the physical connections of one Connector: at most maxConns open, idle ones kept
// LIFO so that surplus connections age out. It has no wait queue of its own: callers hold an
// execution permit, and because the gates' B add up to at most maxConns and a permit is released
// only after its connection is idle again or destroyed, a permit holder always finds an idle
// connection or room to open one. The only waits are for a connection that is still closing, for
// example one the reaper expired, and for one still opening for a caller that left (see dial).
type pool struct {
	connector driver.Connector
	wrap      drivers.Wrap // the driver seam, for each new connection
	maxConns  int
	lifetime  time.Duration // 0 = no limit
	idleTime  time.Duration // 0 = no limit
	jitter    time.Duration // each connection lives lifetime + a random [0, jitter); 0 = none
	obs       *observer     // the Connector's, set once before use (observer.go)
	checkRest time.Duration // checkAfterRest; tests set it before use

	mu sync.Mutex
	// The fields below are guarded by mu.
	idle    []*physConn
	open    int           // connections counted against maxConns: opening, in use, idle or closing
	inUse   int           // connections bound to an operation
	freed   chan struct{} // closed when open drops or a connection turns idle, if someone waits for that; nil otherwise
	closed  bool
	reaping bool // the reaper goroutine runs
	opened  int64
	closedN int64
	failed  int64 // connection attempts that failed while the caller's context was alive

	dialCanceled int64                  // connection attempts cut short by the caller's context
	closedBy     [numCloseReasons]int64 // closedN by reason

	// clock is a coarse time (Unix ns) for lifetimes, advanced by the reaper at least every
	// maxReapInterval: reading the real clock twice per operation costs more than the rest of the
	// pool's work, and lifetimes of minutes do not need nanoseconds.
	clock atomic.Int64

	life context.Context    // ends when close begins: stops the reaper and ends the dials (see dial)
	end  context.CancelFunc // ends life
	bg   sync.WaitGroup     // reaper, dials and background destroys
}

// maxReapInterval bounds how late an expired idle connection is closed, and the pool clock's
// error.
const maxReapInterval = time.Second

func newPool(c driver.Connector, wrap drivers.Wrap, maxConns int, lifetime, idleTime time.Duration) *pool {
	life, end := context.WithCancel(context.Background())
	return &pool{connector: c, wrap: wrap, maxConns: maxConns, lifetime: lifetime, idleTime: idleTime, obs: &observer{}, checkRest: checkAfterRest, life: life, end: end}
}

// get returns a physical connection for a caller that holds an execution permit: an idle one
// (which the caller must reset before use) or a new one.
func (p *pool) get(ctx context.Context) (*physConn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		if n := len(p.idle); n > 0 {
			pc := p.idle[n-1]
			p.idle[n-1] = nil
			p.idle = p.idle[:n-1]
			p.inUse++
			p.mu.Unlock()
			if pc.expired(p.clock.Load(), p.lifetime, p.idleTime) {
				pc.closedFor = pc.expiryReason(p.clock.Load(), p.lifetime)
				p.destroy(pc)
				continue
			}
			return pc, nil
		}
		if p.open < p.maxConns {
			p.open++
			p.startReaperLocked()
			p.bg.Add(1) // the dial's goroutine
			p.mu.Unlock()
			return p.dial(ctx)
		}
		if p.freed == nil {
			p.freed = make(chan struct{})
		}
		freed := p.freed
		p.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// connect opens a connection with connector, dialed through gated (sock is its socket, nil when
// gated's dialer did not make it), and bounded by ctx whatever the driver does.
func connect(ctx context.Context, connector driver.Connector) (dc driver.Conn, sock *sockconn.Conn, err error) {
	slot := new(atomic.Pointer[sockconn.Conn])
	// lib/pq does not bound setting a connection up by the context (without connect_timeout a
	// server that accepts and never answers would hold the caller for ever): the context ending
	// cuts the socket's calls short. pgx bounds it itself.
	stop := context.AfterFunc(ctx, func() {
		if s := slot.Load(); s != nil && s.CutOnConnect() {
			s.Expire(ctx)
		}
	})
	dc, err = connector.Connect(sockconn.WithSlot(ctx, slot))
	if !stop() && err == nil {
		// The context ended as the connection was made: its socket's deadline may have passed.
		dc.Close()
		err = ctx.Err()
	}
	return dc, slot.Load(), err
}

// A dialing is one connection being opened, and whose it is: the caller's that started it, or,
// once that caller has left, the pool's. Its fields are guarded by the pool's mu.
type dialing struct {
	done chan struct{} // closed when the dial ended for a caller still waiting: dc, sock, err are set
	dc   driver.Conn
	sock *sockconn.Conn
	err  error
	left *time.Timer // set when the caller left: ends the dial after leftDialWait
}

// dial opens a connection for a caller under ctx, in a slot of the pool already counted in open
// (and a goroutine counted in bg). The dial is bounded by the pool's life, not by ctx: the caller
// waits for it until ctx ends, and if ctx ends first the caller returns its error and the dial
// goes on, for at most leftDialWait, for the pool. The connection it opens then becomes idle for
// the next caller (who, finding every slot taken, waits for it), or its slot is freed if it fails.
// A dial bound to its caller's context is thrown away whenever it outlasts the caller's
// deadline, and under overload with short deadlines it does: each abandoned attempt still costs
// the server a backend's start-up, dials slow down further, and a gate of 8 on a 2-core server
// at 5 times its capacity with 100 ms deadlines opened no connection at all, every attempt cut
// short (pgxpool goes on with a connection its caller left for the same reason).
func (p *pool) dial(ctx context.Context) (*physConn, error) {
	start := p.obs.now()
	d := &dialing{done: make(chan struct{})}
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(p.life, cancel) // the pool closed
	go func() {
		defer p.bg.Done()
		defer stop()
		defer cancel()
		dc, sock, err := connect(dctx, p.connector)
		p.mu.Lock()
		if d.left == nil {
			d.dc, d.sock, d.err = dc, sock, err
			close(d.done)
			p.mu.Unlock()
			return
		}
		d.left.Stop()
		p.mu.Unlock()
		p.adopt(ctx, start, dctx, dc, sock, err)
	}()
	select {
	case <-d.done:
		return p.dialedFor(ctx, start, d.dc, d.sock, d.err)
	case <-ctx.Done():
	}
	p.mu.Lock()
	select {
	case <-d.done:
		// It ended as ctx did: the caller takes it as usual (binding.ready hands a connection
		// back to the pool when its caller's context has ended).
		p.mu.Unlock()
		return p.dialedFor(ctx, start, d.dc, d.sock, d.err)
	default:
	}
	d.left = time.AfterFunc(leftDialWait, cancel)
	p.countDialFailureLocked(true)
	p.mu.Unlock()
	err := ctx.Err()
	p.obs.dialed(start, ctx, true, err)
	return nil, fmt.Errorf("gated: opening a physical connection: %w", err)
}

// dialedFor finishes a dial for the caller that waited for it under ctx.
func (p *pool) dialedFor(ctx context.Context, start time.Duration, dc driver.Conn, sock *sockconn.Conn, err error) (*physConn, error) {
	canceled := callerEnded(ctx, err)
	p.obs.dialed(start, ctx, canceled, err)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.countDialFailureLocked(canceled)
		p.releaseSlotLocked()
		err = connectError(err, p.obs.dsn)
		if cerr := ctx.Err(); canceled && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			// The driver reported its i/o timeout (the deadline passed): say what ended it.
			if cerr == nil {
				cerr = context.DeadlineExceeded
			}
			return nil, fmt.Errorf("gated: opening a physical connection: %w (%w)", err, cerr)
		}
		return nil, err
	}
	pc := p.newConnLocked(dc, sock)
	p.inUse++
	return pc, nil
}

// adopt finishes a dial whose caller left (ctx was its context; dctx the dial's): its connection
// becomes idle, or is closed when the pool closed or shrank meanwhile; a failure frees the slot
// and counts as the server's or network's unless the pool itself ended the dial (dctx).
func (p *pool) adopt(ctx context.Context, start time.Duration, dctx context.Context, dc driver.Conn, sock *sockconn.Conn, err error) {
	if err != nil {
		ours := dctx.Err() != nil
		if !ours {
			p.obs.dialed(start, ctx, false, err)
		}
		p.mu.Lock()
		if !ours {
			p.countDialFailureLocked(false)
		}
		p.releaseSlotLocked()
		p.mu.Unlock()
		return
	}
	p.obs.dialed(start, ctx, false, nil)
	p.mu.Lock()
	pc := p.newConnLocked(dc, sock)
	if p.closed || p.open > p.maxConns {
		if p.closed {
			pc.closedFor = CloseConnector
		} else {
			pc.closedFor = CloseShrunk
		}
		p.inUse++ // destroy counts it out again
		p.mu.Unlock()
		p.destroy(pc)
		return
	}
	pc.idleSince = p.clock.Load()
	p.idle = append(p.idle, pc)
	p.wakeLocked() // a caller waiting for a slot: this connection is for it
	p.mu.Unlock()
}

// newConnLocked wraps a new driver connection and counts it opened.
func (p *pool) newConnLocked(dc driver.Conn, sock *sockconn.Conn) *physConn {
	p.opened++
	pc := newPhysConn(dc, sock, p.wrap)
	pc.createdAt = p.clock.Load()
	if p.jitter > 0 {
		// The connection's share of the jitter, drawn as it opens, moves its birth later: it
		// expires at lifetime + [0, jitter), so connections opened together expire apart.
		pc.createdAt += rand.Int64N(int64(p.jitter))
	}
	return pc
}

// put makes a healthy connection idle and reports true, or reports false when the pool is closed
// or has more connections open than setMax now allows: the caller must then destroy pc. It runs
// under the releasing gate's lock, so it must not block.
func (p *pool) put(pc *physConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		pc.closedFor = CloseConnector
		return false
	}
	if p.open > p.maxConns {
		pc.closedFor = CloseShrunk
		return false
	}
	pc.idleSince = p.clock.Load()
	p.idle = append(p.idle, pc)
	p.inUse--
	return true
}

// setMax changes P while the pool runs (gate_fleet=on moves it to the instance's share).
// Lowering it closes idle connections above the new maximum at once, least recently used first;
// connections in use above it are closed as their operations end (see put), and no connection
// opens while the pool is at or above it. The caller waits for withinMax. Raising it lets
// callers waiting for a slot open one.
func (p *pool) setMax(n int) {
	p.mu.Lock()
	p.maxConns = n
	if p.closed {
		p.mu.Unlock()
		return
	}
	var excess []*physConn
	for p.open-len(excess) > n && len(excess) < len(p.idle) {
		pc := p.idle[len(excess)]
		pc.closedFor = CloseShrunk
		excess = append(excess, pc)
	}
	kept := copy(p.idle, p.idle[len(excess):])
	clear(p.idle[kept:])
	p.idle = p.idle[:kept]
	p.inUse += len(excess) // destroy counts them out again
	p.bg.Add(len(excess))
	if p.open < n {
		p.wakeLocked()
	}
	p.mu.Unlock()
	p.destroyAll(excess)
}

// withinMax reports whether no more connections are open than setMax last allowed.
func (p *pool) withinMax() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open <= p.maxConns
}

// destroy closes a connection taken out of the pool, waits for the driver's cleanup, and only
// then frees its slot.
func (p *pool) destroy(pc *physConn) {
	pc.close()
	p.mu.Lock()
	p.inUse--
	p.closedN++
	p.closedBy[pc.closedFor]++
	p.releaseSlotLocked()
	p.mu.Unlock()
	p.obs.connClosed(pc.closedFor)
}

// destroyAsync destroys pc in the background and then calls done (when not nil): the permit an
// operation held for pc is released there, after the server-side work has ended. Once the pool
// is closed it destroys pc in the calling goroutine instead, so that close, which waits for the
// background destroys, never races with a new one.
func (p *pool) destroyAsync(pc *physConn, done func()) {
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.bg.Add(1)
	}
	p.mu.Unlock()
	if closed {
		p.destroy(pc)
		if done != nil {
			done()
		}
		return
	}
	go func() {
		defer p.bg.Done()
		p.destroy(pc)
		if done != nil {
			done()
		}
	}()
}

func (p *pool) releaseSlotLocked() {
	p.open--
	p.wakeLocked()
}

// wakeLocked wakes the callers waiting in get for a slot or an idle connection.
func (p *pool) wakeLocked() {
	if p.freed != nil {
		close(p.freed)
		p.freed = nil
	}
}

// close closes the idle connections, stops the reaper and waits for background destroys.
// Connections still bound to operations are closed when those operations end.
func (p *pool) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.inUse += len(idle) // destroy counts them out again
	p.end()
	p.bg.Add(len(idle))
	p.mu.Unlock()
	for _, pc := range idle {
		pc.closedFor = CloseConnector
	}
	p.destroyAll(idle)
	p.bg.Wait()
	if cl, ok := p.connector.(io.Closer); ok {
		cl.Close() // as database/sql closes its connector (gated's MySQL connector keeps a session)
	}
}

// destroyAll destroys conns in parallel, each counted in p.bg by the caller: closing one can
// take as long as the driver's bounded cleanup, and closing them in turn would add those up.
func (p *pool) destroyAll(conns []*physConn) {
	for _, pc := range conns {
		go func() {
			defer p.bg.Done()
			p.destroy(pc)
		}()
	}
}

// startReaperLocked starts the goroutine that closes idle connections past their lifetime or
// idle time, once, when the first connection opens.
func (p *pool) startReaperLocked() {
	if p.reaping || (p.lifetime <= 0 && p.idleTime <= 0) {
		return
	}
	p.reaping = true
	interval := p.idleTime
	if p.lifetime > 0 && (interval <= 0 || p.lifetime < interval) {
		interval = p.lifetime
	}
	interval = min(max(interval/4, time.Millisecond), maxReapInterval)
	p.clock.Store(time.Now().UnixNano())
	p.bg.Add(1)
	go p.reap(interval)
}

func (p *pool) reap(interval time.Duration) {
	defer p.bg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.life.Done():
			return
		case now := <-t.C:
			p.clock.Store(now.UnixNano())
			p.destroyAll(p.takeExpired(now.UnixNano()))
		}
	}
}

// takeExpired removes the expired idle connections and counts them as in use until destroyed.
func (p *pool) takeExpired(now int64) []*physConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var expired []*physConn
	kept := p.idle[:0]
	for _, pc := range p.idle {
		if pc.expired(now, p.lifetime, p.idleTime) {
			pc.closedFor = pc.expiryReason(now, p.lifetime)
			expired = append(expired, pc)
		} else {
			kept = append(kept, pc)
		}
	}
	clear(p.idle[len(kept):])
	p.idle = kept
	p.inUse += len(expired)
	p.bg.Add(len(expired)) // under mu, so that close, which sets closed under mu, waits for them
	return expired
}

// expiryReason says which limit an expired connection passed.
func (pc *physConn) expiryReason(now int64, lifetime time.Duration) CloseReason {
	if lifetime > 0 && time.Duration(now-pc.createdAt) >= lifetime {
		return CloseLifetime
	}
	return CloseIdleTime
}

// stats fills s.
func (p *pool) stats(s *PoolStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.MaxConns = p.maxConns
	s.Open = p.open
	s.Idle = len(p.idle)
	s.InUse = p.inUse
	s.Opened = p.opened
	s.Closed = p.closedN
	s.ConnectErrors = p.failed
	p.closedStatsLocked(s)
}

// closedStatsLocked fills the counters of s of the connections that failed to get ready for
// their caller and of those closed, by reason.
func (p *pool) closedStatsLocked(s *PoolStats) {
	s.ConnectCanceled = p.dialCanceled
	for r := range CloseReason(numCloseReasons) {
		*s.closedCounter(r) = p.closedBy[r]
	}
}

// countDialFailureLocked counts a failed attempt to open a connection: apart, when the caller's
// own context ended it (callerEnded), from the server's or network's failures, so that a short
// deadline on a healthy server does not look like an outage.
func (p *pool) countDialFailureLocked(canceled bool) {
	if canceled {
		p.dialCanceled++
	} else {
		p.failed++
	}
}

// checkCanceled counts a reuse check cut short by the caller's context, with the canceled
// attempts, and marks pc to be closed for that reason rather than as dead.
func (p *pool) checkCanceled(ctx context.Context, pc *physConn, err error) {
	pc.closedFor = CloseCanceled
	p.mu.Lock()
	p.dialCanceled++
	p.mu.Unlock()
	p.obs.checkCanceled(ctx, err)
}
