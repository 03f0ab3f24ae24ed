package sockconn

import (
	"context"
	"net"
	"sync/atomic"
	"time"
)

// slotKey is the context key under which the pool asks gated's dialers for the socket of the
// connection being made. Only dials that carry it are wrapped: pgx's cancel requests dial
// through the same function, and their sockets are none of gated's business.
type slotKey struct{}

// WithSlot returns a context under which WrapDialed wraps the sockets it is given and stores them
// in slot: the pool connects under it, and reads the connection's socket from slot.
func WithSlot(ctx context.Context, slot *atomic.Pointer[Conn]) context.Context {
	return context.WithValue(ctx, slotKey{}, slot)
}

// WrapDialed wraps a socket dialed for a connection that the pool asked for through ctx
// (WithSlot), and returns c itself for any other dial. drainFor is New's. cutOnConnect makes the
// socket's calls fail once the pool's context ends while the connection is being set up (see
// CutOnConnect).
func WrapDialed(ctx context.Context, c net.Conn, drainFor time.Duration, cutOnConnect bool) net.Conn {
	slot, ok := ctx.Value(slotKey{}).(*atomic.Pointer[Conn])
	if !ok {
		return c
	}
	s := New(c, drainFor)
	s.cutOnConnect = cutOnConnect
	slot.Store(s) // a failover dials again: the last socket is the connection's
	return s
}
