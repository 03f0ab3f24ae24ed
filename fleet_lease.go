package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"

	"github.com/gatedsql/gated/internal/drivers"
	"github.com/gatedsql/gated/internal/fleet"
)

// The lease connection of gate_fleet=on (internal/fleet keeps its lease on it): a physical
// connection of the inner driver, whose errors this package classifies and whose LISTEN/NOTIFY
// capability it knows.

// innerLease is a fleet.Conn on a physical connection of the inner driver (pgx or lib/pq), dialed
// through gated as the pool's are, so that each query is a call that a context ending interrupts
// whatever the driver does.
type innerLease struct{ pc *physConn }

// dialLease opens a lease connection with connector, wrapping it as the pool does.
func dialLease(ctx context.Context, connector driver.Connector, wrap drivers.Wrap) (fleet.Conn, error) {
	dc, sock, err := connect(ctx, connector)
	if err != nil {
		return nil, err
	}
	return &innerLease{pc: newPhysConn(dc, sock, wrap)}, nil
}

func (l *innerLease) Query(ctx context.Context, query string, args ...any) ([][]driver.Value, error) {
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	c := l.pc.startCall(ctx)
	defer c.end()
	return readAll(l.pc.query(ctx, query, named))
}

func readAll(rows driver.Rows, err error) ([][]driver.Value, error) {
	if err != nil {
		return nil, err
	}
	var out [][]driver.Value
	for {
		row := make([]driver.Value, len(rows.Columns()))
		if err = rows.Next(row); err != nil {
			break
		}
		out = append(out, row)
	}
	if err == io.EOF {
		err = nil
	}
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return out, err
}

func (l *innerLease) Exec(ctx context.Context, query string) error {
	c := l.pc.startCall(ctx)
	defer c.end()
	_, err := l.pc.exec(ctx, query, nil)
	return err
}

func (l *innerLease) Close() { l.pc.close() }

// SQLState and AnswerLost classify the lease connection's errors as every call's are
// (internal/drivers).
func (l *innerLease) SQLState(err error) string { return drivers.SQLState(err) }

func (l *innerLease) AnswerLost(err error) bool { return drivers.AnswerLost(err) }

// Waiter returns the inner connection's capability to wait for notifications, or nil when it
// has none.
func (l *innerLease) Waiter() fleet.Waiter {
	if w, ok := l.pc.inner.(drivers.NotifyWaiter); ok {
		return leaseWaiter{w}
	}
	return nil
}

// leaseWaiter is a drivers.NotifyWaiter as the fleet waits on it.
type leaseWaiter struct{ w drivers.NotifyWaiter }

func (lw leaseWaiter) WaitNotify(ctx context.Context, self string) error {
	err := lw.w.WaitNotify(ctx, self)
	if errors.Is(err, drivers.ErrNoNotifyWait) {
		return fleet.ErrNoWait
	}
	return err
}
