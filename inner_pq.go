package gated

import (
	"context"
	"database/sql/driver"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/lib/pq"
)

// newPQInner returns a lib/pq connector whose sockets gated dials (see sockConn): their Close
// waits for the server while a statement may still run, and a context that ends interrupts
// their blocking calls.
//
// A DSN lib/pq cannot read fails the first connection, not sql.Open, as with lib/pq itself
// (whose driver reads the DSN only when it connects): the error wraps lib/pq's, whose type
// errors.As still finds, with the password removed from its message.
func newPQInner(dsn string, o innerOptions) (driver.Connector, func(driver.Conn, *sockConn) innerConn, error) {
	cfg, err := pq.NewConfig(dsn)
	if err != nil {
		return failedConnector{fmt.Errorf("gated: inner driver \"postgres\": %w", redactErr(err, dsn))}, newPQWrap(false), nil
	}
	if o.app != "" && cfg.ApplicationName == "" {
		cfg.ApplicationName = o.app
	}
	if o.pooled && !cfg.BinaryParameters {
		return nil, nil, errPoolerDSN("binary_parameters=yes")
	}
	if len(o.params) > 0 && cfg.Runtime == nil {
		cfg.Runtime = map[string]string{}
	}
	for k, v := range o.params {
		cfg.Runtime[k] = v
	}
	pc, err := pq.NewConnectorConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("gated: inner driver \"postgres\": %w", redactErr(err, dsn))
	}
	pc.Dialer(pqDialer{})
	return pc, newPQWrap(o.pooled), nil
}

func newPQWrap(unnamed bool) func(driver.Conn, *sockConn) innerConn {
	return func(dc driver.Conn, sock *sockConn) innerConn {
		return &pqConn{dc: dc, sock: sock, unnamed: unnamed}
	}
}

// failedConnector is the connector of a DSN the driver could not read: every connection fails
// with the driver's error.
type failedConnector struct{ err error }

func (c failedConnector) Connect(context.Context) (driver.Conn, error) { return nil, c.err }
func (c failedConnector) Driver() driver.Driver                        { return &pq.Driver{} }

// pqDialer dials as lib/pq's default dialer does, wrapping the sockets of gated's connections.
type pqDialer struct{ d net.Dialer }

func (d pqDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d pqDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

func (d pqDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := d.d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return wrapDialed(ctx, c, true, true), nil
}

// pqConn is a lib/pq connection. lib/pq reports whether it is still usable (driver.Validator)
// but not its transaction status; gated tracks transactions itself (conn.txOpen).
type pqConn struct {
	dc   driver.Conn
	sock *sockConn

	unnamed bool // gate_pooler=transaction (with binary_parameters=yes): no named statements
}

func (c *pqConn) alive() bool { return c.dc.(driver.Validator).IsValid() }
func (c *pqConn) idle() bool  { return c.alive() }

// close closes the connection; the socket's Close drains when a statement may still run, and
// close waits for that.
func (c *pqConn) close() {
	c.dc.Close()
	if c.sock != nil {
		c.sock.Close() // lib/pq may have left it open after a failed write
		c.sock.awaitDrain()
	}
}

func (c *pqConn) sent() int64 { return sockSent(c.sock) }

func (c *pqConn) unsent(err error, before int64) bool {
	return c.sock != nil && c.sock.written.Load() == before && !c.alive()
}

func (c *pqConn) commitUnknown(err error, before int64) bool {
	return c.sock != nil && c.sock.written.Load() > before && !c.alive() && answerLost(err)
}

func (c *pqConn) endFailedTx() bool {
	if !c.alive() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), endFailedTxTimeout)
	defer cancel()
	c.watch(ctx) // lib/pq's ROLLBACK would otherwise wait for as long as a partition lasts
	ok := sendRollback(c.dc, ctx)
	return c.unwatch() && ok
}

func (c *pqConn) watch(ctx context.Context) {
	if c.sock != nil {
		c.sock.busy.Store(true)
		c.sock.watch(ctx, cancelGrace)
	}
}

func (c *pqConn) unwatch() bool { return c.sock == nil || c.sock.unwatch() }

func (c *pqConn) rested() {
	if c.sock != nil {
		c.sock.busy.Store(false)
	}
}

func (c *pqConn) checkBeforeWrite() { armSock(c.sock) }

func (c *pqConn) closeStmts() bool { return false }

// serverPrepares: behind a transaction pooler (gate_pooler, which requires binary_parameters=yes:
// lib/pq then sends a query with parameters as one unnamed Parse, Bind and Execute, which the
// pooler keeps on one server connection) nothing is prepared on the server, except COPY: lib/pq runs COPY FROM STDIN only as a prepared statement
// (pq.CopyIn), inside a transaction, where PgBouncer keeps the server connection.
func (c *pqConn) serverPrepares(query string) bool { return !c.unnamed || startsWithCopy(query) }

// startsWithCopy reports whether query's first word, after white space and comments, is COPY,
// as lib/pq decides whether Prepare starts a COPY.
func startsWithCopy(query string) bool {
	for {
		query = strings.TrimLeft(query, " \t\r\n")
		switch {
		case strings.HasPrefix(query, "--"):
			_, query, _ = strings.Cut(query, "\n")
		case strings.HasPrefix(query, "/*"):
			_, query, _ = strings.Cut(query[2:], "*/")
		default:
			return len(query) >= 4 && strings.EqualFold(query[:4], "copy")
		}
	}
}

// staleStatement: lib/pq caches no statements of its own.
func (c *pqConn) staleStatement(error) bool { return false }

// beginSet: lib/pq sends BEGIN on its own, so SET LOCAL costs a round trip after it.
func (c *pqConn) beginSet(ctx context.Context, opts driver.TxOptions, set string) (driver.Tx, error) {
	return beginThenSet(ctx, c.dc, opts, set)
}

func (c *pqConn) execSet(ctx context.Context, set string) error { return execSimple(ctx, c.dc, set) }
