//go:build unix

package drivers

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"
)

// waitReadable blocks until nc's socket has something to read or was closed by the peer, without
// taking anything from it, or until ctx ends (then it returns ctx's error, the socket's read
// deadline cleared again). It returns ErrNoNotifyWait for a socket it cannot wait on.
func waitReadable(ctx context.Context, nc net.Conn) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return ErrNoNotifyWait
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return ErrNoNotifyWait
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// An ended context moves the read deadline, which ends the wait of rc.Read; the deadline is
	// cleared once the function that moved it has ended, so that it cannot move it after.
	expired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(expired)
		nc.SetReadDeadline(time.Now())
	})
	var buf [1]byte
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return !errors.Is(rerr, syscall.EAGAIN)
	})
	if !stop() {
		<-expired
		nc.SetReadDeadline(time.Time{})
		if err != nil || rerr != nil {
			return ctx.Err()
		}
	}
	if err != nil {
		return err
	}
	return nil // readable, or the peer's close or error, which the next read reports
}
