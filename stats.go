package gated

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// Stats is a snapshot of one gate and of the physical pool behind it ([Connector.Stats],
// [Connector.WorkloadStats], [Connector.AllStats]). Gauges are ints, counters
// since the Connector was made are int64. Every admitted operation is counted in Admitted; every
// attempt ends in exactly one of Admitted, RejectedFull, RejectedTimeout, RejectedDisplaced and
// Canceled. The counters are kept whether or not an [Observer] is attached; gatedprom and
// gatedotel export them as they are here.
type Stats struct {
	Concurrent int // B: execution permits; with gate_concurrent=auto (or the workload option auto) the current limit
	Queue      int // Q: admission permits beyond B

	Running  int // execution permits held now, borrowed ones included (B - Running + Borrowed - Lent are available)
	Waiting  int // operations waiting for an execution permit now
	Lent     int // this gate's execution permits held now by other gates' operations (the workload option lend)
	Borrowed int // operations counted in Running that hold a permit lent by another gate

	Admitted          int64         // operations that got an execution permit
	RejectedFull      int64         // refused at once with ErrAdmissionFull
	RejectedTimeout   int64         // refused with ErrAdmissionTimeout after gate_queue_wait (or at once when it is 0)
	RejectedDisplaced int64         // refused with ErrAdmissionDisplaced while waiting: an arrival of a higher priority or of a tenant with fewer waiters took the place
	Canceled          int64         // whose context ended while they waited, or that the Connector's Close ended
	WaitDuration      time.Duration // total time admitted operations waited for their execution permit

	StatementTimeouts int64 // statements that failed with SQLSTATE 57014 while their context was alive (statement_timeout)
	LockTimeouts      int64 // statements that failed with SQLSTATE 55P03 (lock_timeout, NOWAIT)
	CommitUnknown     int64 // commits that failed with ErrCommitUnknown

	Pool  PoolStats
	Fleet FleetStats // the instance's share of its fleet's totals (gate_fleet=on); zero without a fleet
}

// StatsSeq is what [Connector.AllStats] returns: an iterator over every gate, the workload's name
// with its Stats, to range over:
//
//	for name, s := range c.AllStats() { ... }
//
// It is a func type so that fmt prints it through [StatsSeq.String] instead of as a func
// pointer. Functions that take an iter.Seq2 need a conversion, as in
// maps.Collect(iter.Seq2[string, gated.Stats](c.AllStats())).
type StatsSeq func(yield func(string, Stats) bool)

// String takes a snapshot of every gate, as ranging over s does, and returns it as text: a line
// per gate, "default" first, with its permits, its operations now and its counters, then a line
// for the physical pool that the gates share, for example
//
//	default: B=4 Q=4 running=1 waiting=0 admitted=12 rejected_full=0 rejected_timeout=0 canceled=0 wait=0s
//	pool: P=8 open=2 idle=1 in_use=1 opened=2 closed=0 connect_errors=0
//
// Lent and borrowed permits, displaced waiters, timeouts, unknown commits and the fleet's share are
// shown only when they are not zero. The format is for people; programs read the Stats fields.
func (s StatsSeq) String() string {
	var b strings.Builder
	var pool PoolStats
	for name, st := range s {
		fmt.Fprintf(&b, "%s: B=%d Q=%d running=%d waiting=%d", name, st.Concurrent, st.Queue, st.Running, st.Waiting)
		if st.Lent != 0 || st.Borrowed != 0 {
			fmt.Fprintf(&b, " lent=%d borrowed=%d", st.Lent, st.Borrowed)
		}
		fmt.Fprintf(&b, " admitted=%d rejected_full=%d rejected_timeout=%d", st.Admitted, st.RejectedFull, st.RejectedTimeout)
		if st.RejectedDisplaced != 0 {
			fmt.Fprintf(&b, " rejected_displaced=%d", st.RejectedDisplaced)
		}
		fmt.Fprintf(&b, " canceled=%d wait=%v", st.Canceled, st.WaitDuration)
		if st.StatementTimeouts != 0 || st.LockTimeouts != 0 || st.CommitUnknown != 0 {
			fmt.Fprintf(&b, " statement_timeouts=%d lock_timeouts=%d commit_unknown=%d",
				st.StatementTimeouts, st.LockTimeouts, st.CommitUnknown)
		}
		if f := st.Fleet; f.Members != 0 {
			fmt.Fprintf(&b, " fleet: members=%d conns=%d/%d B=%d Q=%d", f.Members, f.Conns, f.TotalConns, f.TotalConcurrent, f.TotalQueue)
		}
		b.WriteByte('\n')
		pool = st.Pool
	}
	fmt.Fprintf(&b, "pool: P=%d open=%d idle=%d in_use=%d opened=%d closed=%d connect_errors=%d",
		pool.MaxConns, pool.Open, pool.Idle, pool.InUse, pool.Opened, pool.Closed, pool.ConnectErrors)
	return b.String()
}

// FleetStats describes an instance's place in its fleet (gate_fleet=on): all zero without one.
// The instance's share of the gate's B and Q is Stats.Concurrent and Stats.Queue, and of the
// working connections Conns, which Pool.MaxConns equals; its lease connection is one more, outside
// the fleet's total.
type FleetStats struct {
	Members         int   // live instances of the fleet as the last successful refresh saw them, this one included
	Conns           int   // this instance's share of gate_max_conns, its working connections (its lease connection is one more); 0 while it joins or is fenced
	TotalConns      int   // the fleet's gate_max_conns
	TotalConcurrent int   // the fleet's B of this gate
	TotalQueue      int   // the fleet's Q of this gate
	Seated          bool  // the instance holds a share it can run operations with: Conns > 0 and a permit (a grant may give connections before permits); false from the moment it begins to shrink to no permit (fencing, leaving), while its running work drains
	ShareChanges    int64 // times the instance's share changed (each is logged)
	RefreshErrors   int64 // lease refreshes that failed (the share is kept, never grown, until it is fenced)
	SchemaMissing   bool  // the fleet's table or this version's functions are missing and the instance's role may not create them (see docs/fleet.md)
}

// PoolStats describes the physical connections.
type PoolStats struct {
	MaxConns      int   // P
	Open          int   // connections counted against P: being opened, idle, in use or being closed
	Idle          int   // idle connections
	InUse         int   // connections taken from the pool: bound to an operation, or being closed
	Opened        int64 // connections opened
	Closed        int64 // connections closed, the sum of the seven Closed* counters below (ClosedFor)
	ConnectErrors int64 // attempts to open a connection that failed for the server's or network's reasons, not the caller's context (also after the caller left: the attempt goes on for the pool)

	ConnectCanceled int64 // attempts to get a connection ready (open one, or check an idle one before reuse) that the caller's context ended: canceled, or its deadline passed, however the driver reported it (a connection being opened goes on opening for the pool)
	ClosedBroken    int64 // closed because unusable after an operation (failed, busy, left in a transaction, canceled mid-statement)
	ClosedLifetime  int64 // closed after gate_max_conn_lifetime
	ClosedIdleTime  int64 // closed after gate_max_conn_idle_time idle
	ClosedDeadIdle  int64 // found dead before reuse while the caller's context was alive: the server or network closed it while idle (terminated backend, restart, failover), or its reset failed
	ClosedByClose   int64 // closed by the Connector's Close
	ClosedCanceled  int64 // closed because the caller's context cut its reuse check, or a statement that sent nothing, short (CloseCanceled)
	ClosedShrunk    int64 // closed because the pool's share of its fleet shrank (CloseShrunk, gate_fleet=on)
}

// snapshot assembles the Stats of gate g, with pool, a snapshot of the shared physical pool
// (poolSnapshot): the one place where Stats is put together from the owners of its counters,
// for Connector.Stats, WorkloadStats and AllStats alike. The owners are the gate (its permits
// and the attempts' counters, under its lock), its workloadObs (the counters kept where that
// lock is not held), the pool (its own lock) and the fleet's share.
func (c *Connector) snapshot(g *gate, pool PoolStats) Stats {
	s := Stats{Pool: pool}
	g.stats(&s)
	g.wl.stats(&s)
	c.set.fleetStats(&s, g)
	return s
}

// poolSnapshot returns a snapshot of the shared physical pool, for snapshot.
func (c *Connector) poolSnapshot() PoolStats {
	var p PoolStats
	c.pool.stats(&p)
	return p
}

// workloadObs is a gate's part of observability: its name, its two refusal errors, made once,
// and the counters kept outside gate.mu, because they are counted where the gate's lock is not
// held.
type workloadObs struct {
	name              string
	full, timeout     error // *RejectedError of RejectFull and RejectTimeout: a refusal allocates nothing
	displaced         error // *RejectedError of RejectDisplaced
	statementTimeouts atomic.Int64
	lockTimeouts      atomic.Int64
	commitUnknown     atomic.Int64
	refusals          summarizer // counts[0] full, counts[1] timeout, counts[2] displaced
}

// init names the gate's workload and makes its refusal errors.
func (w *workloadObs) init(name string) {
	w.name = name
	w.full = newRejectedError(name, RejectFull)
	w.timeout = newRejectedError(name, RejectTimeout)
	w.displaced = newRejectedError(name, RejectDisplaced)
}

// stats fills the counters of s that workloadObs keeps.
func (w *workloadObs) stats(s *Stats) {
	s.StatementTimeouts = w.statementTimeouts.Load()
	s.LockTimeouts = w.lockTimeouts.Load()
	s.CommitUnknown = w.commitUnknown.Load()
}
