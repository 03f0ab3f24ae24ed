package drivers

import (
	"context"
	"errors"
)

// A NotifyWaiter is a Conn that can wait, on an idle connection, for a notification of a
// channel the connection listens to (PostgreSQL's LISTEN/NOTIFY): the fleet's lease connection
// (the root's fleet_lease.go, for internal/fleet) uses it to refresh at once when another member
// joined, shrank or left. It is optional: without it (MySQL, any other driver, lib/pq where the
// platform cannot wait on a socket) the fleet refreshes at its regular interval only.
type NotifyWaiter interface {
	// WaitNotify blocks until a notification whose payload is not self has arrived, ctx has
	// ended, or the connection has failed. It returns nil for a notification, whether it arrived
	// now or during an earlier statement on the connection; ctx's error when ctx ended first,
	// the connection staying usable; ErrNoNotifyWait at once when it cannot wait here; any other
	// error when the connection is broken. One call at a time, and no other call on the
	// connection meanwhile.
	WaitNotify(ctx context.Context, self string) error
}

// ErrNoNotifyWait is what WaitNotify returns when the connection cannot be waited on.
var ErrNoNotifyWait = errors.New("gated: the connection cannot wait for notifications")
