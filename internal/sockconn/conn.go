// Package sockconn is the socket layer under gated's pgx and lib/pq connections: the net.Conn
// wrapper that gated's dialers put around every socket they make for a connection of the pool
// (Conn, WrapDialed), the count of the bytes a connection wrote, the liveness check of a
// connection that was idle (a non-blocking peek before its first write: conncheck_*.go), the
// kernel's reading of how long ago the server's last data arrived (sockage_*.go), the draining
// Close and the context watch that lib/pq lacks (watch.go).
//
// It reports what it sees of a socket and nothing more: it never touches permits, the pool or a
// connection's state, and it knows nothing of gated's root package. Its caller decides what a
// count, a failed check or an age means (a replay, a destroy, a hold time).
package sockconn

import (
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

// A Conn is a socket gated dialed for pgx or lib/pq. Seeing the socket lets gated answer
// questions the drivers answer wrongly or not at all:
//
//   - Did a statement leave the process? The bytes written are counted (Written). A driver's
//     driver.ErrBadConn or pgconn's SafeToRetry cannot be trusted for that (pgx reports "conn
//     closed", safe to retry, for a COMMIT whose answer was lost; lib/pq reports ErrBadConn
//     after writing on a clean close), so gated replays a statement and classifies a COMMIT
//     from the count alone.
//   - Did the server hang up while the connection was idle (pg_terminate_backend, a restart)?
//     After CheckBeforeWrite, the next write first peeks at the socket (one non-blocking recv);
//     if the server has closed it or sent something unasked, the write fails without sending
//     anything, so the statement can run on another connection.
//   - Once a write has failed the connection is broken, and what the driver writes next is its
//     farewell, not the statement: it is sent but not counted. pgx's cleanup goroutine writes
//     Terminate after a failed write while the call that failed is still deciding what it sent;
//     counted, a statement that never left would be reported as one that may have run. Sent,
//     because pgx then reads until the server closes its end, which the server does on
//     Terminate: unsent, the cleanup, and the permit with it, would wait for its bound (gated's
//     drivers.CleanupWait).
//   - For lib/pq only: Close waits until the backend hung up while a statement may still run
//     on it (lib/pq sends a cancel request but closes its socket without waiting for the
//     server, which would give the permit back while the backend still works), and a context
//     that ends interrupts a blocked read or write (lib/pq cannot: see Watch), so the caller
//     returns at its deadline even during a network partition.
//   - How long ago did the server's last data arrive (SinceLastRecv)? At the end of an
//     operation, that is time the client spent after the database had answered: its goroutines
//     waiting for a core, or the application reading the rows. gate_concurrent=auto takes it off
//     the hold time it learns from (see the root's binding.serviceHold).
type Conn struct {
	net.Conn
	check   *sockCheck // nil where the platform cannot peek
	age     *sockAge   // nil where the platform or the socket (unix-domain) cannot tell
	written atomic.Int64
	armed   atomic.Bool // peek before the next write
	failed  atomic.Bool // a write failed: what is written after it is not counted

	// lib/pq only.
	drainFor     time.Duration         // Close drains a busy socket for at most this long; 0: never
	cutOnConnect bool                  // the dial's context bounds the connection's set-up (WrapDialed)
	busy         atomic.Bool           // a call ran on the connection since it was last idle
	expiredBy    atomic.Pointer[error] // the context's error, once a watch cut the socket's calls short
	mu           sync.Mutex
	// Guarded by mu.
	watching bool   // a call's watch is armed (Watch)
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

// New wraps c. A positive drainFor makes Close, while the socket is busy (SetBusy), half-close it
// and read until the server closes its end, at most drainFor (lib/pq); 0 closes it at once.
func New(c net.Conn, drainFor time.Duration) *Conn {
	return &Conn{Conn: c, check: newSockCheck(c), age: newSockAge(c), drainFor: drainFor}
}

// SinceLastRecv returns how long ago the kernel last received data on the socket, in its steps
// (see sockAge), or 0 when it cannot tell: another platform, a unix-domain socket. It costs a
// system call (on Linux, over TCP); the caller must own the connection.
func (s *Conn) SinceLastRecv() time.Duration { return s.age.since() }

// Written returns how many bytes of the connection's statements were written: the bytes sent
// before a write first failed.
func (s *Conn) Written() int64 { return s.written.Load() }

// CheckBeforeWrite makes the next write first check the socket (see sockCheck): if the server
// hung up or sent something unasked, that write fails having sent nothing.
func (s *Conn) CheckBeforeWrite() { s.armed.Store(true) }

// Checks reports whether the socket can be checked before a write; where the platform cannot peek
// without blocking, CheckBeforeWrite does nothing.
func (s *Conn) Checks() bool { return s.check != nil }

// SetBusy records whether a statement may run on the server: set when a call begins, cleared when
// the connection goes back idle. Close drains only a busy socket.
func (s *Conn) SetBusy(busy bool) { s.busy.Store(busy) }

// CutOnConnect reports whether the end of the dial's context must cut the connection's set-up
// short (Expire): the driver does not bound it by the context (lib/pq).
func (s *Conn) CutOnConnect() bool { return s.cutOnConnect }

func (s *Conn) Write(b []byte) (int, error) {
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
// half-closes it and reads until the server closes its end, at most drainFor (New): a PostgreSQL
// backend closes its socket only when it exits, after the statement it ran has ended and it read
// Terminate. A connection abandoned while connecting, or closed while idle, is closed at once.
func (s *Conn) Close() error {
	s.once.Do(func() {
		// From now on no watch expires the socket: its deadline would end the drain early.
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		if s.drainFor > 0 && s.busy.Load() {
			if cw, ok := s.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				// lib/pq closes its socket itself, in the caller's goroutine, when a context
				// ended: the drain goes on in the background, and the connection's destroy
				// (internal/drivers' pqConn.Close) waits for it, so the permit follows it.
				s.drained = make(chan struct{})
				go func() {
					defer close(s.drained)
					s.Conn.SetReadDeadline(time.Now().Add(s.drainFor))
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

// AwaitDrain waits until a drain started by Close has ended. Call it after Close (sync.Once
// orders the two).
func (s *Conn) AwaitDrain() {
	if d := s.drained; d != nil {
		<-d
	}
}

func (s *Conn) Read(b []byte) (int, error) {
	n, err := s.Conn.Read(b)
	if err != nil {
		err = s.explain(err)
	}
	return n, err
}

// explain turns the timeout of a call that a watch cut short into an error that wraps the
// context's error, so errors.Is(err, context.DeadlineExceeded) holds as with pgx. It stays a
// *net.OpError: lib/pq marks its connection bad only for that type.
func (s *Conn) explain(err error) error {
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
