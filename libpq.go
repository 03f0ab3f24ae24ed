package gated

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// lib/pq closes a connection whose query was cancelled without waiting for the server: when a
// context ends while rows are read, its watcher marks the connection bad and sends a cancel
// request, and rows.Close then sends Terminate and closes the socket at once, while the cancel is
// still on its way (or was caught by the statement, which goes on). Destroying the connection
// would then give the permit back while the backend still works (I4). A PostgreSQL backend closes
// its end of the connection only when it exits, after the statement it ran has ended and it read
// Terminate, so the connections gated gives lib/pq wait for that in Close, bounded by cleanupWait,
// as pgx's asynchronous close does.

// drainingDialer dials as lib/pq's default dialer does, returning drainingConns.
type drainingDialer struct{ d net.Dialer }

func (d drainingDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d drainingDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

func (d drainingDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := d.d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	dc := &drainingConn{Conn: c}
	if slot, ok := ctx.Value(netConnSlot{}).(*net.Conn); ok {
		*slot = c // the socket itself, which the pool checks before reuse (sockCheck)
	}
	return dc, nil
}

// netConnSlot is the context key under which pool.dial asks a dialer for the socket it made.
type netConnSlot struct{}

// A drainingConn's Close half-closes the connection and reads until the server closes its end.
type drainingConn struct {
	net.Conn
	once sync.Once
	err  error
}

func (c *drainingConn) Close() error {
	c.once.Do(func() {
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			c.Conn.SetReadDeadline(time.Now().Add(cleanupWait))
			io.Copy(io.Discard, c.Conn)
		}
		c.err = c.Conn.Close()
	})
	return c.err
}
