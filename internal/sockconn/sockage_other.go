//go:build !linux || 386

package sockconn

import (
	"net"
	"time"
)

// A sockAge would tell how long ago data last arrived on a socket; only Linux's TCP_INFO says so
// (linux/386 lacks the direct getsockopt system call that the Linux version makes). Elsewhere the
// age is unknown, 0, and the hold time gate_concurrent=auto learns from keeps the client's wait.
type sockAge struct{}

func newSockAge(net.Conn) *sockAge { return nil }

func (*sockAge) since() time.Duration { return 0 }
