package gated

import "time"

// Stats is a snapshot of one gate and of the physical pool behind it. Gauges are ints, counters
// since the Connector was made are int64. Every admitted operation is counted in Admitted; every
// attempt ends in exactly one of Admitted, RejectedFull, RejectedTimeout and Canceled.
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

	Pool PoolStats
}

// PoolStats describes the physical connections.
type PoolStats struct {
	MaxConns      int   // P
	Open          int   // connections counted against P: being opened, idle, in use or being closed
	Idle          int   // idle connections
	InUse         int   // connections taken from the pool: bound to an operation, or being closed
	Opened        int64 // connections opened
	Closed        int64 // connections closed
	ConnectErrors int64 // attempts to open a connection that the server or the network failed

	ConnectCanceled int64 // attempts to open a connection cut short by the caller's own context
}
