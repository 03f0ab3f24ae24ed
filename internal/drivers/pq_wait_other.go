//go:build !unix

package drivers

import (
	"context"
	"net"
)

// waitReadable cannot wait on a socket here: the fleet refreshes at its regular interval.
func waitReadable(context.Context, net.Conn) error { return ErrNoNotifyWait }
