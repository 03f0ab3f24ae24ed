// Package gated is a database/sql driver that puts admission control in front of the connection
// pool of another driver (pgx v5 by default, lib/pq, go-sql-driver/mysql, or any registered
// driver; see Drivers below for what each one guarantees).
//
// A connection pool limits connections, but not how many callers wait for one, and it never says
// "no" early: under overload goroutines pile up in front of it and deadlines expire after the work
// was queued anyway. gated gives every *sql.DB a bulkhead with two budgets:
//
//   - B execution permits (gate_concurrent): operations that run, from taking a physical
//     connection to its cleanup. Acquired first-in first-out, waiting at most gate_queue_wait and
//     never past the context's deadline.
//   - B+Q admission permits (gate_queue is Q): every operation inside the gate, running or
//     waiting. When none is free the operation fails at once with [ErrAdmissionFull].
//
// # Usage
//
// Existing code keeps its *sql.DB and changes two lines: it imports gated, and opens the driver
// "gated" instead of its own, with the gate_ keys in the DSN:
//
//	import "github.com/gatedsql/gated" // registers the driver "gated"
//
//	db, err := sql.Open("gated", "postgres://app@db:5432/shop?sslmode=disable&gate_max_conns=24&gate_concurrent=16&gate_queue=8&gate_queue_wait=20ms")
//
// Every BeginTx, ExecContext, QueryContext, PrepareContext and statement use, Conn and
// PingContext on db then passes the gate. Answer a refusal with HTTP 503:
//
//	if gated.IsRejected(err) {
//		http.Error(w, "overloaded", http.StatusServiceUnavailable)
//	}
//
// [Open] does the same and also sets database/sql's pool so it cannot undo the gate; with
// sql.Open, leave SetMaxOpenConns at 0 (or at least B+Q) and SetMaxIdleConns at B+Q or more.
// SetConnMaxLifetime and SetConnMaxIdleTime close only database/sql's virtual connections, never
// a physical one: use gate_max_conn_lifetime and gate_max_conn_idle_time. [CheckDB] reports a
// *sql.DB whose settings undo the gate, and these two once they have closed a connection.
//
// # How it works
//
// database/sql takes a connection from its own pool before it calls the driver, so a driver that
// wrapped connections one to one could only gate after that wait. gated's [Connector] therefore
// hands out virtual connections that cost no I/O. The first call on one binds it: admission permit,
// execution permit, then a physical connection from gated's own pool of at most P
// (gate_max_conns). The binding ends when database/sql takes the connection back: after Commit or
// Rollback, rows.Close, or (*sql.Conn).Close. A healthy physical connection then goes straight to
// the next waiter together with the permit, or back to the pool; a broken one is closed, and the
// permit is released only once the driver's cleanup (including a server-side cancel) has ended.
// Because the B of every gate add up to at most P, nobody waits for a physical connection beyond
// one still being opened: the gate's queue is the only queue. A connection being opened when its
// caller's context ends goes on opening for the pool, and serves the next caller.
//
// # Drivers
//
// gate_driver names the inner driver. What gated can promise depends on it:
//
//   - "pgx" (pgx v5, the default) and "postgres" (lib/pq), which gated imports: when a context
//     ends while a statement runs, the driver's cancel request goes to the server and the permit
//     comes back only once the backend has hung up (at most 15 s). gated dials their sockets, and
//     takes their transaction state from the server (see Calls below).
//   - "mysql" (go-sql-driver/mysql, which the application imports; gated does not): the driver
//     only closes its socket when a context ends, and MySQL and MariaDB go on running the
//     statement, so gated sends KILL QUERY with the connection's id (read with SELECT
//     CONNECTION_ID() when the connection opens, and used only on the same server and run of it)
//     over a session of its own, and keeps the permit
//     until information_schema.PROCESSLIST no longer shows the statement (at most 15 s). That
//     session is one connection per Connector beyond P, opened on the first cancellation: count
//     P+1 against max_connections. It is not taken from P, which would lower the largest B to P-1
//     and forbid P=1 for the sake of a rarely needed session. driver.ErrBadConn is trusted (the
//     driver returns it only before writing), and a connection killed while idle is found by the
//     driver's own check in ResetSession (checkConnLiveness, on by default) and replaced. Only an
//     ended context leads to a kill: the driver's readTimeout and writeTimeout do not.
//   - Any other registered driver: the permit comes back when the driver returns; work the server
//     goes on with after a cancel is not awaited. driver.ErrBadConn is trusted as database/sql
//     trusts it, and a connection killed while idle is replaced only when the driver's
//     ResetSession or IsValid reports it.
//
// # Configuration
//
// [ParseDSN] reads the gate_ keys out of the DSN and passes the rest to the inner driver, in URL
// form (postgres://...?gate_concurrent=16) or keyword/value form (host=... gate_concurrent=16):
// gate_driver, gate_max_conns, gate_concurrent (a number, or auto), gate_concurrent_min,
// gate_queue, gate_queue_wait,
// gate_max_conn_lifetime, gate_max_conn_lifetime_jitter, gate_max_conn_idle_time,
// gate_queue_order ([QueueFIFO] or [QueueAdaptive]), gate_workloads, gate_name,
// gate_statement_timeout, gate_lock_timeout, gate_pooler, and for a fleet gate_fleet,
// gate_fleet_table, gate_fleet_ttl and gate_fleet_refresh. [ParseDSN] and [Config] document
// each with its default. A [Config] built in code has the same defaults: a zero field means the
// default, and [None] spells the "none" that a DSN writes 0 (gate_queue=0). With pgx, a Tracer, a
// TLS config of your own or type registrations go in [Config.PgxBeforeConnect] and
// [Config.PgxAfterConnect], which run for every physical connection. pgxpool's pool_ keys are
// refused, naming the gate_ key to use instead.
//
// # Workloads
//
// gate_workloads=batch:2:2:1s adds a gate named "batch" beside the default one, with budgets of
// its own, on the same physical pool (the sum of all B is at most P). [WithWorkload] chooses the
// gate for the operations under a context; the first operation on a connection decides, and a
// transaction or pinned *sql.Conn keeps it. A batch job then cannot take the permits interactive
// requests need. An unconfigured name fails with [ErrUnknownWorkload]. [Connector.WorkloadStats]
// reports each gate. gate_name shares one set of gates and one pool between the *sql.DB handles
// of a process.
//
// # Who goes first: tenants and priorities
//
// Inside one gate, [WithPriority] serves every waiter of a higher priority before any of a lower
// one, and [WithTenant] makes the callers' tenants share the gate: waiters are served round-robin
// across tenants, first in, first out within one, a tenant that had nobody waiting first. When
// admission is full, an arrival of a higher priority, or of a tenant with two or more waiters
// fewer than the tenant with the most, displaces that priority's or tenant's newest waiter, which
// gets [ErrAdmissionDisplaced]; a running operation is never interrupted. With neither set, the
// gate serves first in, first out as before, and the context is not even read unless an
// operation must wait. A transaction or pinned *sql.Conn keeps the tenant and priority of its
// first operation, as it keeps its workload.
//
// # Fleet
//
// gate_fleet=on (with gate_name) makes gate_max_conns and every gate's B and Q the totals of all
// live instances of that gate_name on the database (each instance keeps one lease connection
// beside its share of gate_max_conns): each instance runs with its share, and the
// shares move as instances join, leave or die, coordinated through PostgreSQL itself (a lease
// table, a session advisory lock per instance, growth granted under a transaction-level advisory
// lock). An instance shrinks before it declares a smaller share, grows only into what the others
// have declared free, starts with nothing, and fences itself to nothing before its lease can
// expire when it cannot refresh it. [Stats].Fleet reports the share; gatedbudget -live lists the
// members. See docs/fleet.md.
//
// # Deadlines and transactions
//
// gate_statement_timeout=deadline makes the server stop a statement when the caller's deadline
// has passed, not only the wait for a permit (SET LOCAL in the same round trip as BEGIN with pgx;
// outside transactions a session value set only when it changes). [InTx] runs a function in a
// transaction the way a production helper must: gate before BEGIN, rollback on error or panic
// with the rollback's error attached, commit failures never retried ([ErrCommitUnknown] when the
// outcome is unknown), opt-in retries of serialization failures and deadlocks through the gate.
//
// # Errors
//
// [ErrAdmissionFull] and [ErrAdmissionTimeout] are refusals ([IsRejected] tells), returned as a
// [*RejectedError] that names the workload whose gate refused and why; a context that
// ends before the operation got its permit yields an error wrapping [ErrWaitCanceled] and the
// context's error. [ErrCommitUnknown] means a COMMIT left the process and no answer came back.
//
// Errors of the inner driver pass through unchanged, so errors.As(err, &pgErr) keeps working.
// gated never returns an error wrapping driver.ErrBadConn for its own reasons, so database/sql
// does not retry a refusal.
//
// # Calls: replays, context watches and transaction state
//
// Every call into the inner driver (an exec, a query until its rows close, a begin, commit,
// rollback, prepare or ping) is one call with a lifetime of its own: what guards it and what
// happened to it end with it, and the next call starts clean.
//
// What gated replays: nothing that may have reached the server. With pgx and lib/pq it counts the
// bytes each call writes to the connection's socket and runs an operation again on another
// connection only when none of it was written, on a binding that holds no session state yet (a
// connection the server closed while it was idle is found by a peek at the socket before the
// first write). With other drivers it trusts driver.ErrBadConn, as database/sql does.
//
// When a context watch applies: only while the call it guards runs. pgx watches the context
// itself. lib/pq cannot interrupt a blocked read or write, so gated watches the context of each
// lib/pq call and, 100 ms after it ended, cuts the socket's blocking calls short; the watch ends
// when the call returns, so a context cancelled afterwards (a helper's deferred cancel) does
// nothing. A query's call lasts until its rows close. Commit and Rollback are calls of their own
// and run under no context: an earlier statement's context never cuts a COMMIT short. With
// MySQL, a call that returns with its context ended and its connection given up by the driver
// marks the connection: when it is destroyed, gated kills the statement first, whatever calls
// came after on the same binding.
//
// How gated learns a connection's transaction state: from the server. pgx reports the status of
// the last ReadyForQuery (idle, in a transaction, in a failed one); lib/pq records it, and gated
// reads that record (it works over TLS too, where the socket carries only ciphertext; should a
// lib/pq version keep it elsewhere, the state is unknown, and gated then sends nothing of its own
// and destroys every connection instead of reusing it). A connection the server does not report
// idle is never put back into the pool, and gate_statement_timeout=deadline sends its own SET or
// RESET only on a session the server reported idle: never inside a transaction the application
// began itself (BEGIN on a pinned *sql.Conn). For other drivers, which report nothing, gated
// knows only the transactions begun through BeginTx, as database/sql does.
//
// # Observability
//
// [Connector.Stats] reports running and waiting operations, refusals, wait time and the physical
// pool; [Connector.AllStats] yields every workload's gate; [FromDB] finds the Connector behind a
// *sql.DB. The pool's counters say whose fault a failure was: an attempt cut short by the
// caller's own context or deadline is ConnectCanceled, never ConnectErrors or ClosedDeadIdle.
//
// For distributions and events, attach an [Observer] ([Connector.Attach], or [Config.Observer]
// before the Connector is made): it receives every wait, connect, hold and statement duration
// and every refusal, timeout and connection event, with the operation's context, with no cost
// when none is attached and no allocation per operation when one is. The modules gatedprom
// (Prometheus) and gatedotel (OpenTelemetry, metrics and span events) attach theirs, so a
// Connector that sql.Open made from a DSN exports everything. [Config.Logger] logs only what an
// operator must act on: connection failures of the server or the network, unknown commits and
// refusals summarized at most once per second per workload.
//
// # Caveats
//
// PingContext binds like any other operation: under overload a readiness probe is refused, which
// is usually the right signal. (*sql.Conn).Raw hands out the virtual connection; [Unwrap] reaches
// the inner driver's connection.
//
// Behind a transaction-pooling PgBouncer, set gate_pooler=transaction and ask the inner driver for
// no named statements (pgx: default_query_exec_mode=exec; lib/pq: binary_parameters=yes): gated
// then prepares no statement on the server either, and a prepared *sql.Stmt runs as an unprepared
// query at each use, its errors surfacing at first use rather than at Prepare (lib/pq's COPY is
// still prepared); see [PoolerTransaction].
package gated
