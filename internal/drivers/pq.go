package drivers

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatedsql/gated/internal/dsn"
	"github.com/gatedsql/gated/internal/sockconn"
	"github.com/lib/pq"
)

// newPQ returns a lib/pq connector whose sockets gated dials (see sockconn.Conn): their Close
// waits for the server while a statement may still run, and a context that ends interrupts
// their blocking calls.
//
// A DSN lib/pq cannot read fails the first connection, not sql.Open, as with lib/pq itself
// (whose driver reads the DSN only when it connects): the error wraps lib/pq's, whose type
// errors.As still finds, with the password removed from its message.
func newPQ(source string, o Options) (driver.Connector, Wrap, error) {
	cfg, err := pq.NewConfig(source)
	if err != nil {
		return failedConnector{fmt.Errorf("gated: inner driver \"postgres\": %w", dsn.RedactError(err, source))}, newPQWrap(false), nil
	}
	if o.App != "" && cfg.ApplicationName == "" {
		cfg.ApplicationName = o.App
	}
	if o.Pooled && !cfg.BinaryParameters {
		return nil, nil, errPoolerDSN("binary_parameters=yes")
	}
	if len(o.Params) > 0 && cfg.Runtime == nil {
		cfg.Runtime = map[string]string{}
	}
	for k, v := range o.Params {
		cfg.Runtime[k] = v
	}
	pc, err := pq.NewConnectorConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("gated: inner driver \"postgres\": %w", dsn.RedactError(err, source))
	}
	pc.Dialer(pqDialer{})
	return pc, newPQWrap(o.Pooled), nil
}

func newPQWrap(unnamed bool) Wrap {
	return func(dc driver.Conn, sock *sockconn.Conn) Conn {
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
	return sockconn.WrapDialed(ctx, c, CleanupWait, true), nil
}

// pqConn is a lib/pq connection. lib/pq reports whether it is still usable (driver.Validator)
// but has no API for the transaction status the server sends with every ReadyForQuery; it keeps
// it in its connection, and gated reads it there (pqTxStatus).
type pqConn struct {
	dc   driver.Conn
	sock *sockconn.Conn

	unnamed bool // gate_pooler=transaction (with binary_parameters=yes): no named statements

	// The notifications lib/pq read during statements, for WaitNotify; set up by its first call.
	notifyOnce sync.Once
	notifyMu   sync.Mutex
	notified   []string // guarded by notifyMu: their payloads, at most maxPQNotified
}

func (c *pqConn) Alive() bool { return c.dc.(driver.Validator).IsValid() }
func (c *pqConn) Idle() bool  { return c.Alive() && c.TxStatus() == 'I' }

func (c *pqConn) TxStatus() byte { return pqTxStatus(c.dc) }

// WatchesSocket: lib/pq cannot interrupt a blocked read or write when a context ends.
func (c *pqConn) WatchesSocket() bool { return true }

// Close closes the connection; the socket's Close drains when a statement may still run, and
// Close waits for that.
func (c *pqConn) Close(bool) {
	c.dc.Close()
	if c.sock != nil {
		c.sock.Close() // lib/pq may have left it open after a failed write
		c.sock.AwaitDrain()
	}
}

func (c *pqConn) Sent() int64 { return sockSent(c.sock) }

func (c *pqConn) Unsent(err error, before int64) bool {
	return c.sock != nil && c.sock.Written() == before && !c.Alive()
}

func (c *pqConn) CommitUnknown(err error, before int64) bool {
	return c.sock != nil && c.sock.Written() > before && !c.Alive() && AnswerLost(err)
}

// EndFailedTx sends ROLLBACK unless the server reported the connection idle. The ROLLBACK is a
// call of its own, watched under a context of its own: lib/pq's would otherwise wait for as long
// as a partition lasts.
func (c *pqConn) EndFailedTx() bool {
	if !c.Alive() {
		return false
	}
	if c.TxStatus() == 'I' {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), endFailedTxTimeout)
	defer cancel()
	var w sockconn.Watch
	if c.sock != nil {
		w = c.sock.Watch(ctx, 0)
	}
	ok := sendRollback(c.dc, ctx)
	if w.End() {
		return false
	}
	return ok && c.Idle()
}

// pqTxStatus returns the transaction status that lib/pq recorded from the server's last
// ReadyForQuery message, in its connection's unexported field txnStatus, or '?' when dc has no
// such field (another lib/pq version: TestLibPQTransactionStatusIsRead fails then). The server's
// word is the only one that holds: an application's own BEGIN, ROLLBACK or failing statement on
// a pinned *sql.Conn changes it without database/sql knowing, and the status byte cannot be read
// from the socket below TLS. The field is written by lib/pq only in the goroutine of a call, and
// read between calls by the binding's goroutine.
func pqTxStatus(dc driver.Conn) byte {
	v := reflect.ValueOf(dc)
	f := pqTxField.Load()
	if f == nil || v.Type() != f.typ {
		f = findPQTxField(v.Type())
	}
	if f.index < 0 {
		return '?'
	}
	return byte(v.Elem().Field(f.index).Uint())
}

// pqTxFieldOf is where txnStatus sits in a lib/pq connection type; index -1: nowhere.
type pqTxFieldOf struct {
	typ   reflect.Type
	index int
}

var pqTxField atomic.Pointer[pqTxFieldOf]

func findPQTxField(t reflect.Type) *pqTxFieldOf {
	f := &pqTxFieldOf{typ: t, index: -1}
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		if sf, ok := t.Elem().FieldByName("txnStatus"); ok && sf.Type.Kind() == reflect.Uint8 && len(sf.Index) == 1 {
			f.index = sf.Index[0]
		}
	}
	pqTxField.Store(f)
	return f
}

func (c *pqConn) CheckBeforeWrite() { armSock(c.sock) }

// CheckEveryReuse: lib/pq reports a statement sent to a session the server ended as
// driver.ErrBadConn, which database/sql runs again on another connection with the plain lib/pq
// (and which gated may not return: the statement was sent).
func (c *pqConn) CheckEveryReuse() bool { return true }

func (c *pqConn) CloseStmts() bool { return false }

// ServerPrepares: behind a transaction pooler (gate_pooler, which requires binary_parameters=yes:
// lib/pq then sends a query with parameters as one unnamed Parse, Bind and Execute, which the
// pooler keeps on one server connection) nothing is prepared on the server, except COPY: lib/pq runs COPY FROM STDIN only as a prepared statement
// (pq.CopyIn), inside a transaction, where PgBouncer keeps the server connection.
func (c *pqConn) ServerPrepares(query string) bool { return !c.unnamed || startsWithCopy(query) }

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

// StaleStatement: lib/pq caches no statements of its own.
func (c *pqConn) StaleStatement(error) bool { return false }

// BeginSet: lib/pq sends BEGIN on its own, so SET LOCAL costs a round trip after it.
func (c *pqConn) BeginSet(ctx context.Context, opts driver.TxOptions, set string) (driver.Tx, error) {
	return beginThenSet(ctx, c.dc, opts, set)
}

func (c *pqConn) ExecSet(ctx context.Context, set string) error { return execSimple(ctx, c.dc, set) }

// RefusedStale reads lib/pq's error (see staleRefusal).
func (c *pqConn) RefusedStale(err error) bool {
	var e *pq.Error
	return errors.As(err, &e) && staleRefusal(string(e.Code), e.Message, e.Where, e.Routine)
}

// pqNotifyPoll bounds how long a lib/pq lease connection waits on its socket before it sends an
// empty statement anyway (see WaitNotify): a notification lib/pq holds in its buffer is seen this
// late at most.
const pqNotifyPoll = time.Second

// maxPQNotified bounds the payloads a lib/pq connection keeps between two WaitNotify calls; one
// not kept was not self's, since self's comes once per statement that notifies.
const maxPQNotified = 16

// WaitNotify: lib/pq reads a notification only while it reads a statement's results (and hands
// it to the connection's notification handler), and has nothing to wait on an idle connection.
// So the first call sets the handler, which records the payloads; then, as long as none but self's
// is recorded, it waits until the socket has something to read (waitReadable, which takes
// nothing from it), or pqNotifyPoll at most, and lets lib/pq read it with an empty statement. The handler replaces any the
// connection had: WaitNotify is called only on the fleet's lease connection, which the
// application never sees.
func (c *pqConn) WaitNotify(ctx context.Context, self string) error {
	if c.sock == nil {
		return ErrNoNotifyWait
	}
	c.notifyOnce.Do(func() {
		pq.SetNotificationHandler(c.dc, func(n *pq.Notification) {
			c.notifyMu.Lock()
			if len(c.notified) < maxPQNotified {
				c.notified = append(c.notified, n.Extra)
			} else {
				c.notified[maxPQNotified-1] = "" // one was lost: report it as another's
			}
			c.notifyMu.Unlock()
		})
	})
	for {
		if c.takeNotified(self) {
			return nil
		}
		// lib/pq reads the socket through a buffer: a notification that came in the same read as
		// the end of the empty statement's answer stays there, unread, and the socket shows
		// nothing more. So the wait on the socket is bounded, and the empty statement that
		// follows reads what the buffer holds.
		poll, cancel := context.WithTimeout(ctx, pqNotifyPoll)
		err := waitReadable(poll, c.sock.Conn)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !errors.Is(err, context.DeadlineExceeded):
			return err
		}
		w := c.sock.Watch(ctx, 0)
		err = execSimple(ctx, c.dc, "")
		if w.End() && err == nil {
			err = ctx.Err()
		}
		if err != nil {
			if ctx.Err() != nil && c.Alive() {
				return ctx.Err()
			}
			return err
		}
	}
}

// takeNotified reports whether a notification whose payload is not self was recorded, and
// forgets them all.
func (c *pqConn) takeNotified(self string) bool {
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	other := slices.ContainsFunc(c.notified, func(p string) bool { return p != self })
	c.notified = c.notified[:0]
	return other
}
