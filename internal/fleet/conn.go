package fleet

import (
	"context"
	"database/sql/driver"
	"errors"
)

// A Conn is the connection a member keeps its lease on, which the member's dial function opens.
// It belongs to the member's loop: one call at a time. It classifies its own errors: what they
// mean depends on its driver, which the package never sees.
type Conn interface {
	// Query runs one statement and returns its rows.
	Query(ctx context.Context, query string, args ...any) ([][]driver.Value, error)
	// Exec runs statements without arguments (several, separated by semicolons).
	Exec(ctx context.Context, query string) error
	// Close closes the connection and returns once the driver's cleanup has ended.
	Close()
	// SQLState returns the SQLSTATE of a server error in err's chain, or "" when the server did
	// not answer with an error.
	SQLState(err error) string
	// AnswerLost reports whether err says that the server's answer did not arrive: the
	// connection failed, or the session was ended.
	AnswerLost(err error) bool
	// Waiter returns the connection's capability to wait for notifications (notify.go), or nil
	// when it has none: the member then refreshes at its regular interval only.
	Waiter() Waiter
}

// A Waiter is a lease connection that can wait, idle, for a notification of a channel it
// listens to.
type Waiter interface {
	// WaitNotify blocks until a notification whose payload is not self has arrived, ctx has
	// ended, or the connection has failed. It returns nil for a notification, whether it arrived
	// now or during an earlier statement on the connection; ctx's error when ctx ended first,
	// the connection staying usable; ErrNoWait at once when it cannot wait here; any other error
	// when the connection is broken. One call at a time, and no other call on the connection
	// meanwhile.
	WaitNotify(ctx context.Context, self string) error
}

// ErrNoWait is what WaitNotify returns when the connection cannot be waited on.
var ErrNoWait = errors.New("gated: the connection cannot wait for notifications")
