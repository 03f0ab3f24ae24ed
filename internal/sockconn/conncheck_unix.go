//go:build unix

package sockconn

import (
	"errors"
	"net"
	"syscall"
)

// A sockCheck looks at a connection's socket before the first write after the connection was idle
// (and before COMMIT), from Conn.Write: if the check fails nothing is written. An idle
// PostgreSQL backend sends nothing unless it is terminating (pg_terminate_backend, a shutdown),
// except NOTIFY and parameter changes, rare on pooled connections. If anything is there to read,
// or the peer has gone, the write fails having sent nothing, and the statement runs on another
// connection instead of being carried into a failure whose outcome would be unclear.
type sockCheck struct {
	rc   syscall.RawConn
	fn   func(fd uintptr) // s.peek, bound once: a method value per call would allocate
	gone bool
	buf  [1]byte
}

// newSockCheck returns a check for nc's socket, or nil when it cannot be inspected.
func newSockCheck(nc net.Conn) *sockCheck {
	rc := rawConnOf(nc)
	if rc == nil {
		return nil
	}
	s := &sockCheck{rc: rc}
	s.fn = s.peek
	return s
}

// peerGone reports, without blocking and without consuming anything, whether the socket has
// something to read or was closed by the peer. It costs one non-blocking recv system call. A nil
// check reports false.
func (s *sockCheck) peerGone() bool {
	if s == nil {
		return false
	}
	s.gone = false
	// Control, not Read: Read would wait for the socket's read lock, which a driver's background
	// reader (pgx has one) may hold while it blocks in a read of its own.
	if err := s.rc.Control(s.fn); err != nil {
		return true
	}
	return s.gone
}

func (s *sockCheck) peek(fd uintptr) {
	n, _, err := syscall.Recvfrom(int(fd), s.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	s.gone = n > 0 || err == nil || !errors.Is(err, syscall.EAGAIN)
}
