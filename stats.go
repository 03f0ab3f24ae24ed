package gated

import "time"

// Stats is a snapshot of one gate and of the physical pool behind it. Gauges are ints, counters
// since the Connector was made are int64. Every admitted operation is counted in Admitted; every
// attempt ends in exactly one of Admitted, RejectedFull, RejectedTimeout and Canceled. The
// counters are kept whether or not an [Observer] is attached; gatedprom and gatedotel export them
// as they are here.
type Stats struct {
	Concurrent int // B: execution permits
	Queue      int // Q: admission permits beyond B

	Running int // execution permits held now (B - Running are available)
	Waiting int // operations waiting for an execution permit now

	Admitted        int64         // operations that got an execution permit
	RejectedFull    int64         // refused at once with ErrAdmissionFull
	RejectedTimeout int64         // refused with ErrAdmissionTimeout after gate_queue_wait (or at once when it is 0)
	Canceled        int64         // whose context ended while they waited, or that the Connector's Close ended
	WaitDuration    time.Duration // total time admitted operations waited for their execution permit

	StatementTimeouts int64 // statements that failed with SQLSTATE 57014 while their context was alive (statement_timeout)
	LockTimeouts      int64 // statements that failed with SQLSTATE 55P03 (lock_timeout, NOWAIT)
	CommitUnknown     int64 // commits that failed with ErrCommitUnknown

	Pool PoolStats
}

// PoolStats describes the physical connections.
type PoolStats struct {
	MaxConns      int   // P
	Open          int   // connections counted against P: being opened, idle, in use or being closed
	Idle          int   // idle connections
	InUse         int   // connections taken from the pool: bound to an operation, or being closed
	Opened        int64 // connections opened
	Closed        int64 // connections closed, the sum of the five Closed* counters below
	ConnectErrors int64 // attempts to open a connection that failed while the caller's context was alive: the server's or network's failures

	ConnectCanceled int64 // attempts to open a connection cut short because the caller's context ended
	ClosedBroken    int64 // closed because unusable after an operation (failed, busy, left in a transaction, canceled mid-statement)
	ClosedLifetime  int64 // closed after gate_max_conn_lifetime
	ClosedIdleTime  int64 // closed after gate_max_conn_idle_time idle
	ClosedDeadIdle  int64 // found dead before reuse (killed while idle, server restart, failed reset)
	ClosedByClose   int64 // closed by the Connector's Close
}
