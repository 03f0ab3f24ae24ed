package gated

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A sockConn is a socket gated dialed for pgx or lib/pq. Seeing the socket lets gated answer
// questions the drivers answer wrongly or not at all:
//
//   - Did a statement leave the process? The bytes written are counted. A driver's
//     driver.ErrBadConn or pgconn's SafeToRetry cannot be trusted for that (pgx reports "conn
//     closed", safe to retry, for a COMMIT whose answer was lost; lib/pq reports ErrBadConn
//     after writing on a clean close), so gated replays a statement and classifies a COMMIT
//     from the count alone.
//   - Did the server hang up while the connection was idle (pg_terminate_backend, a restart)?
//     After the connection was idle, the first write first peeks at the socket (one
//     non-blocking recv); if the server has closed it or sent something unasked, the write
//     fails without sending anything, so the statement can run on another connection.
//   - Once a write has failed the connection is broken, and what the driver writes next is its
//     farewell, not the statement: it is sent but not counted. pgx's cleanup goroutine writes
//     Terminate after a failed write while the call that failed is still deciding what it sent;
//     counted, a statement that never left would be reported as one that may have run. Sent,
//     because pgx then reads until the server closes its end, which the server does on
//     Terminate: unsent, the cleanup, and the permit with it, would wait for cleanupWait.
//   - For lib/pq only: Close waits until the backend hung up while a statement may still run
//     on it (lib/pq sends a cancel request but closes its socket without waiting for the
//     server, which would give the permit back while the backend still works), and a context
//     that ends interrupts a blocked read or write (lib/pq cannot), so the caller returns at
//     its deadline even during a network partition.
//   - How long ago did the server's last data arrive (sinceLastRecv)? At the end of an
//     operation, that is time the client spent after the database had answered: its goroutines
//     waiting for a core, or the application reading the rows. gate_concurrent=auto takes it off
//     the hold time it learns from (see binding.serviceHold).
type sockConn struct {
	net.Conn
	check   *sockCheck // nil where the platform cannot peek
	age     *sockAge   // nil where the platform or the socket (unix-domain) cannot tell
	written atomic.Int64
	armed   atomic.Bool // peek before the next write
	failed  atomic.Bool // a write failed: what is written after it is not counted

	// lib/pq only.
	drainOnClose bool
	cutOnConnect bool                  // pool.dial's context bounds the connection's set-up
	busy         atomic.Bool           // a call ran on the connection since it was last idle
	expiredBy    atomic.Pointer[error] // the context's error, once a watch cut the socket's calls short
	mu           sync.Mutex
	// Guarded by mu.
	watching bool   // a call's watch is armed (sockWatch)
	watchGen uint64 // changes when a watch ends, so that its late expiry does nothing
	cutShort bool   // the armed watch expired the socket
	closing  bool   // Close began: nothing expires the socket any more (it would end the drain)

	once     sync.Once
	closeErr error
	drained  chan struct{} // set by Close when it drains in the background; closed when done
}

// errHungUpWhileIdle is what a write returns, having sent nothing, when the server closed the
// connection (or sent something unasked) while it was idle.
var errHungUpWhileIdle = errors.New("gated: the server closed the connection while it was idle; nothing was sent")

// rawConnOf returns the raw connection of nc's socket (under TLS, of the socket under it), or nil
// when nc has none.
func rawConnOf(nc net.Conn) syscall.RawConn {
	if t, ok := nc.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		nc = t.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

func newSockConn(c net.Conn, drainOnClose bool) *sockConn {
	return &sockConn{Conn: c, check: newSockCheck(c), age: newSockAge(c), drainOnClose: drainOnClose}
}

// sinceLastRecv returns how long ago the kernel last received data on the socket, in its steps
// (see sockAge), or 0 when it cannot tell: another platform, a unix-domain socket. It costs a
// system call (on Linux, over TCP); the caller must own the connection.
func (s *sockConn) sinceLastRecv() time.Duration { return s.age.since() }

func (s *sockConn) Write(b []byte) (int, error) {
	if s.failed.Load() {
		return s.Conn.Write(b)
	}
	if s.armed.Load() {
		s.armed.Store(false)
		if s.check.peerGone() {
			s.failed.Store(true)
			return 0, &net.OpError{Op: "write", Net: "tcp", Err: errHungUpWhileIdle}
		}
	}
	n, err := s.Conn.Write(b)
	s.written.Add(int64(n))
	if err != nil {
		s.failed.Store(true)
		err = s.explain(err)
	}
	return n, err
}

// Close closes the socket. For lib/pq while an operation may still run on the server, it first
// half-closes it and reads until the server closes its end, at most cleanupWait: a PostgreSQL
// backend closes its socket only when it exits, after the statement it ran has ended and it read
// Terminate. A connection abandoned while connecting, or closed while idle, is closed at once.
func (s *sockConn) Close() error {
	s.once.Do(func() {
		// From now on no watch expires the socket: its deadline would end the drain early.
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		if s.drainOnClose && s.busy.Load() {
			if cw, ok := s.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				// lib/pq closes its socket itself, in the caller's goroutine, when a context
				// ended: the drain goes on in the background, and the connection's destroy
				// (pqConn.close) waits for it, so the permit follows it.
				s.drained = make(chan struct{})
				go func() {
					defer close(s.drained)
					s.Conn.SetReadDeadline(time.Now().Add(cleanupWait))
					io.Copy(io.Discard, s.Conn)
					s.Conn.Close()
				}()
				return
			}
		}
		s.closeErr = s.Conn.Close()
	})
	return s.closeErr
}

// awaitDrain waits until a drain started by Close has ended. Call it after Close (sync.Once
// orders the two).
func (s *sockConn) awaitDrain() {
	if d := s.drained; d != nil {
		<-d
	}
}

// cancelGrace is how long after a context ended a lib/pq socket's blocking calls are cut short.
// lib/pq reacts to the context itself by sending the server a cancel request, and the statement
// then ends with the server's error; but only if lib/pq notices the context before its call
// returns: a socket cut at once would often win that race, and the server would go on running
// the statement with nobody to cancel it. The grace lets lib/pq's cancel go first; it matters
// only when the server does not answer, as in a network partition.
const cancelGrace = 100 * time.Millisecond

// A sockWatch is one driver call's context watch on a lib/pq socket: once the call's context has
// ended for the grace, the socket's blocking calls fail, until the call ends. It belongs to the
// call that armed it (see call), which ends it when it returns; an expiry that comes later does
// nothing. A socket has at most one: a call that begins while another's watch is armed (the open
// rows of a query) arms none, and the socket stays guarded by the first. The zero value is no
// watch.
type sockWatch struct {
	s    *sockConn
	stop func() bool // context.AfterFunc's
	gen  uint64      // the socket's watchGen while this watch is armed
}

// watch arms a watch for a call under ctx, or returns none when ctx never ends or another call's
// watch is armed. It allocates only when it arms one (as context.AfterFunc does).
func (s *sockConn) watch(ctx context.Context, grace time.Duration) sockWatch {
	if ctx.Done() == nil {
		return sockWatch{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watching {
		return sockWatch{}
	}
	s.watching = true
	gen := s.watchGen
	stop := context.AfterFunc(ctx, func() {
		if grace > 0 {
			t := time.NewTimer(grace)
			<-t.C
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.watchGen == gen && !s.closing {
			s.cutShort = true
			s.expireLocked(ctx)
		}
	})
	return sockWatch{s: s, stop: stop, gen: gen}
}

// armed reports whether w is a watch.
func (w *sockWatch) armed() bool { return w.s != nil }

// end ends the watch when its call returns, and reports whether it cut the socket's calls short:
// the socket's deadline has passed, and the connection's protocol state is unknown. It does
// nothing on no watch, or one that has ended.
func (w *sockWatch) end() (cutShort bool) {
	s := w.s
	if s == nil {
		return false
	}
	w.s = nil
	w.stop()
	return s.endWatch(w.gen)
}

// endWatch ends the armed watch gen (or whichever is armed, for gen ^uint64(0)): an expiry of it
// that comes later does nothing. It reports whether the watch had cut the socket short.
func (s *sockConn) endWatch(gen uint64) (cutShort bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.watching || (gen != anyWatch && gen != s.watchGen) {
		return false
	}
	cutShort = s.cutShort
	s.watching, s.cutShort = false, false
	s.watchGen++
	return cutShort
}

// anyWatch names, for endWatch, whichever watch is armed.
const anyWatch = ^uint64(0)

// expire makes the socket's blocking calls fail now, their errors wrapping ctx's, unless the
// socket is being closed.
func (s *sockConn) expire(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(ctx)
}

func (s *sockConn) expireLocked(ctx context.Context) {
	if s.closing {
		return
	}
	err := context.Cause(ctx)
	s.expiredBy.Store(&err)
	s.Conn.SetDeadline(time.Now())
}

func (s *sockConn) Read(b []byte) (int, error) {
	n, err := s.Conn.Read(b)
	if err != nil {
		err = s.explain(err)
	}
	return n, err
}

// explain turns the timeout of a call that a watch cut short into an error that wraps the
// context's error, so errors.Is(err, context.DeadlineExceeded) holds as with pgx. It stays a
// *net.OpError: lib/pq marks its connection bad only for that type.
func (s *sockConn) explain(err error) error {
	cause := s.expiredBy.Load()
	var op *net.OpError
	if cause == nil || !errors.As(err, &op) || !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	cp := *op
	cp.Err = &cutShortError{ctx: *cause, err: op.Err}
	return &cp
}

// cutShortError is the cause of a socket call that a watch cut short.
type cutShortError struct{ ctx, err error }

func (e *cutShortError) Error() string {
	return fmt.Sprintf("gated: the call was cut short: the context ended (%v) and the server did not answer in time", e.ctx)
}

func (e *cutShortError) Unwrap() []error { return []error{e.ctx, e.err} }
func (e *cutShortError) Timeout() bool   { return true }

// netConnSlot is the context key under which pool.dial asks gated's dialers for the socket of
// the connection being made. Only dials that carry it are wrapped: pgx's cancel requests dial
// through the same function, and their sockets are none of gated's business.
type netConnSlot struct{}

// wrapDialed wraps a socket dialed for a connection that pool.dial asked for through ctx.
// cutOnConnect makes the socket's calls fail once pool.dial's context ends while the connection
// is being set up (see pool.dial).
func wrapDialed(ctx context.Context, c net.Conn, drainOnClose, cutOnConnect bool) net.Conn {
	slot, ok := ctx.Value(netConnSlot{}).(*atomic.Pointer[sockConn])
	if !ok {
		return c
	}
	s := newSockConn(c, drainOnClose)
	s.cutOnConnect = cutOnConnect
	slot.Store(s) // a failover dials again: the last socket is the connection's
	return s
}
