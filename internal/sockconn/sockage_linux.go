//go:build linux && !386

package sockconn

import (
	"net"
	"syscall"
	"time"
	"unsafe"
)

// A sockAge tells how long ago data last arrived on a TCP socket, from the kernel: TCP_INFO's
// tcpi_last_data_recv, the time since the kernel queued the last segment that carried data for
// the socket, whoever has read it since (pure ACKs do not count). It is the raw socket's: under
// TLS (crypto/tls runs over the Conn that gated dialed, for pgx and lib/pq alike) the
// records arrive on it as they would in the clear, so the age is the same.
//
// The kernel keeps the time in jiffies and reports milliseconds: the age comes in steps of one
// tick (4 ms at HZ=250, 1 ms at HZ=1000, 10 ms at HZ=100), and may be up to one tick more or
// less than the true age. See the root's recvAgeStep for how that is allowed for.
type sockAge struct {
	rc   syscall.RawConn
	fn   func(fd uintptr) // a.read, bound once: a method value per call would allocate
	info syscall.TCPInfo
	size uint32
	ok   bool
}

// newSockAge returns nc's sockAge, or nil when nc is not a TCP socket (a unix-domain one has no
// TCP_INFO) or cannot be inspected. A *tls.Conn reports the address of the socket under it, and
// rawConnOf reaches that socket.
func newSockAge(nc net.Conn) *sockAge {
	if _, ok := nc.LocalAddr().(*net.TCPAddr); !ok {
		return nil
	}
	rc := rawConnOf(nc)
	if rc == nil {
		return nil
	}
	a := &sockAge{rc: rc}
	a.fn = a.read
	return a
}

// since returns how long ago data last arrived on the socket, in the kernel's steps; 0 when it
// cannot tell (nil, a closed socket). It costs one getsockopt system call and allocates nothing.
// Its caller owns the socket's connection (the sockAge is not safe for concurrent use).
func (a *sockAge) since() time.Duration {
	if a == nil {
		return 0
	}
	a.ok = false
	// Control, not Read: it never waits for the socket's read lock.
	if a.rc.Control(a.fn) != nil || !a.ok {
		return 0
	}
	return time.Duration(a.info.Last_data_recv) * time.Millisecond
}

func (a *sockAge) read(fd uintptr) {
	a.size = uint32(unsafe.Sizeof(a.info))
	_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_INFO,
		uintptr(unsafe.Pointer(&a.info)), uintptr(unsafe.Pointer(&a.size)), 0)
	a.ok = e == 0 && uintptr(a.size) >= unsafe.Offsetof(a.info.Last_data_recv)+unsafe.Sizeof(a.info.Last_data_recv)
}
