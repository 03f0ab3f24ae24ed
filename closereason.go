package gated

import (
	"context"
	"iter"
	"time"
)

// A CloseReason says why a physical connection was closed.
type CloseReason uint8

// The reasons a physical connection is closed, counted in PoolStats.Closed* and reported with
// EventConnClosed.
const (
	// CloseBroken: unusable at the end of an operation (the driver closed it, it was left in a
	// transaction or busy, it failed or its context ended mid-statement).
	CloseBroken CloseReason = iota
	// CloseLifetime: older than gate_max_conn_lifetime.
	CloseLifetime
	// CloseIdleTime: idle longer than gate_max_conn_idle_time.
	CloseIdleTime
	// CloseDeadIdle: found dead when it was to be used, before the caller's context ended: the
	// server or the network had closed it while it was idle (a backend terminated, a server
	// restart or failover), or its session reset failed.
	CloseDeadIdle
	// CloseConnector: closed by the Connector's Close (by DB.Close).
	CloseConnector
	// CloseCanceled: its check before reuse, or a statement that never reached the server, was
	// cut short by the caller's context (canceled, or its deadline passed), which leaves the
	// connection in a state gated cannot trust. Nothing was wrong with the server.
	CloseCanceled
	// CloseShrunk: closed because the pool's share of a fleet's connections shrank
	// (gate_fleet=on): idle at once, in use when its operation ended.
	CloseShrunk

	numCloseReasons = iota
)

var closedForNames = [numCloseReasons]string{"broken", "lifetime", "idle_time", "dead_idle", "close", "canceled", "shrunk"}

// String returns the reason's name: "broken", "lifetime", "idle_time", "dead_idle", "close",
// "canceled" or "shrunk", the reason label of gatedprom's and gatedotel's close counters.
func (r CloseReason) String() string {
	if int(r) < len(closedForNames) {
		return closedForNames[r]
	}
	return "unknown"
}

// CloseReasons yields every CloseReason, in the order of their values.
func CloseReasons() iter.Seq[CloseReason] {
	return func(yield func(CloseReason) bool) {
		for r := range CloseReason(numCloseReasons) {
			if !yield(r) {
				return
			}
		}
	}
}

// ClosedFor returns the connections closed for r: one of the Closed* counters.
func (s *PoolStats) ClosedFor(r CloseReason) int64 {
	if n := s.closedCounter(r); n != nil {
		return *n
	}
	return 0
}

// closedCounter returns the Closed* counter of s that counts r, nil for no reason: the one place
// a CloseReason is mapped to its field, for ClosedFor and for the pool's snapshot.
func (s *PoolStats) closedCounter(r CloseReason) *int64 {
	switch r {
	case CloseBroken:
		return &s.ClosedBroken
	case CloseLifetime:
		return &s.ClosedLifetime
	case CloseIdleTime:
		return &s.ClosedIdleTime
	case CloseDeadIdle:
		return &s.ClosedDeadIdle
	case CloseConnector:
		return &s.ClosedByClose
	case CloseCanceled:
		return &s.ClosedCanceled
	case CloseShrunk:
		return &s.ClosedShrunk
	}
	return nil
}

// callerEnded reports whether err, the failure of an attempt to get a connection ready for an
// operation under ctx (a dial, a reuse check, a statement that sent nothing), was the caller's
// doing: its context was canceled, or its deadline had passed when the attempt returned. The
// second covers drivers that set the socket's deadline to the context's (net.Dialer does, and
// so does gated's watch): their i/o timeout fires a moment before ctx.Err is set, and would
// otherwise count a caller's short deadline as a failure of a healthy server.
func callerEnded(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && err != nil && !time.Now().Before(deadline)
}

// deadReason is the close reason of a connection found unusable by an operation under ctx
// that failed with err before anything reached the server.
func deadReason(ctx context.Context, err error) CloseReason {
	if callerEnded(ctx, err) {
		return CloseCanceled
	}
	return CloseDeadIdle
}
