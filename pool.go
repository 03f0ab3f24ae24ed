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
)

// cleanupWait bounds how long a destroyed connection may keep its permit while the driver
// finishes its asynchronous cleanup (pgx closes a cancelled connection in the background).
const cleanupWait = 15 * time.Second

// A pool owns the physical connections of one Connector: at most maxConns open, idle ones kept
// LIFO so that surplus connections age out. It has no wait queue of its own: callers hold an
// execution permit, and because the gates' B add up to at most maxConns and a permit is released
// only after its connection is idle again or destroyed, a permit holder always finds an idle
// connection or room to open one. The only wait is for a connection that is still closing, for
// example one the reaper expired.
type pool struct {
	connector driver.Connector
	wrap      func(driver.Conn, *sockConn) innerConn // the driver seam, for each new connection
	maxConns  int
	lifetime  time.Duration // 0 = no limit
	idleTime  time.Duration // 0 = no limit
	jitter    time.Duration // each connection lives lifetime + a random [0, jitter); 0 = none
	obs       *observer     // the Connector's, set once before use (observe.go)

	mu sync.Mutex
	// The fields below are guarded by mu.
	idle    []*physConn
	open    int           // connections counted against maxConns: opening, in use, idle or closing
	inUse   int           // connections bound to an operation
	freed   chan struct{} // closed when open drops, if someone waits for that; nil otherwise
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

	stop chan struct{}  // closed by close: stops the reaper
	bg   sync.WaitGroup // reaper and background destroys
}

// maxReapInterval bounds how late an expired idle connection is closed, and the pool clock's
// error.
const maxReapInterval = time.Second

func newPool(c driver.Connector, wrap func(driver.Conn, *sockConn) innerConn, maxConns int, lifetime, idleTime time.Duration) *pool {
	return &pool{connector: c, wrap: wrap, maxConns: maxConns, lifetime: lifetime, idleTime: idleTime, obs: &observer{}, stop: make(chan struct{})}
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
func connect(ctx context.Context, connector driver.Connector) (dc driver.Conn, sock *sockConn, err error) {
	slot := new(atomic.Pointer[sockConn])
	// lib/pq does not bound setting a connection up by the context (without connect_timeout a
	// server that accepts and never answers would hold the caller for ever): the context ending
	// cuts the socket's calls short. pgx bounds it itself.
	stop := context.AfterFunc(ctx, func() {
		if s := slot.Load(); s != nil && s.cutOnConnect {
			s.expire(ctx)
		}
	})
	dc, err = connector.Connect(context.WithValue(ctx, netConnSlot{}, slot))
	if !stop() && err == nil {
		// The context ended as the connection was made: its socket's deadline may have passed.
		dc.Close()
		err = ctx.Err()
	}
	return dc, slot.Load(), err
}

func (p *pool) dial(ctx context.Context) (*physConn, error) {
	start := p.obs.now()
	dc, sock, err := connect(ctx, p.connector)
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
	p.opened++
	p.inUse++
	pc := newPhysConn(dc, sock, p.wrap)
	pc.createdAt = p.clock.Load()
	if p.jitter > 0 {
		// The connection's share of the jitter, drawn as it opens, moves its birth later: it
		// expires at lifetime + [0, jitter), so connections opened together expire apart.
		pc.createdAt += rand.Int64N(int64(p.jitter))
	}
	return pc, nil
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
	if p.freed != nil && p.open < n {
		close(p.freed)
		p.freed = nil
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
	close(p.stop)
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
		case <-p.stop:
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
	p.obsStatsLocked(s)
}
