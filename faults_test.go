package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/drivers"
	"github.com/gatedsql/gated/internal/faultproxy"
	"github.com/lib/pq"
)

// What gated adds around the gate — replays of statements lost with a connection, the commit
// classification, the statement cache, connection cleanup — under faults: connections cut at
// chosen points of the conversation, backends terminated while they work, migrations, network
// partitions, panics. Rules: never run work twice that may have reached the server, never hide
// that a commit may have happened, never let a closed statement poison a query, never lose a
// permit.

// awaitFired waits for a proxy rule to have acted.
func awaitFired(t *testing.T, fired <-chan struct{}) {
	t.Helper()
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy's rule never fired")
	}
}

// within waits for done, failing the test when it takes longer than limit: for calls that must
// not wait for a network partition to end (the limit is far below what waiting would take).
func within(t *testing.T, what string, limit time.Duration, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v: it waits for the partition", what, limit)
	}
}

// awaitCleanup waits until the cleanups of broken connections have given their permits back; they
// may take as long as the driver's bounded cleanup (drivers.CleanupWait).
func awaitCleanup(t *testing.T, c *Connector) {
	t.Helper()
	deadline := time.Now().Add(drivers.CleanupWait + 5*time.Second)
	for c.Stats().Running != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the cleanup never gave the permit back: %+v", c.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const oneAtATime = "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=5s"

// A COMMIT forwarded to the server whose answer never comes back may have been applied: Commit
// must say so with ErrCommitUnknown, whichever way the connection is cut. pgx reports such a cut
// as "conn closed" with SafeToRetry true, lib/pq a clean close as driver.ErrBadConn: neither can
// be trusted once COMMIT was written.
func TestCommitWhoseAnswerIsLostIsReportedUnknown(t *testing.T) {
	commitThroughProxy(t, func(p *faultproxy.Proxy, how faultproxy.How) func(*testing.T) {
		fired := p.Arm(faultproxy.Rule{Match: []byte("commit"), Fold: true, When: faultproxy.AfterResponse, How: how})
		return func(t *testing.T) { awaitFired(t, fired) }
	}, func(t *testing.T, err error, rows int) {
		if !errors.Is(err, ErrCommitUnknown) {
			t.Errorf("Commit whose answer was lost: %v, want ErrCommitUnknown", err)
		}
		if errors.Is(err, driver.ErrBadConn) {
			t.Errorf("Commit's error wraps driver.ErrBadConn: %v", err)
		}
		if rows != 1 {
			t.Errorf("the server has %d rows; it answered the COMMIT, so 1", rows)
		}
	})
}

// A COMMIT that never left the process did not commit: no ErrCommitUnknown. The proxy cuts the
// connection (FIN or RST) before Commit is called; the check before COMMIT is written finds it.
func TestCommitOnAConnectionCutBeforeCOMMITIsNotUnknown(t *testing.T) {
	commitThroughProxy(t, func(p *faultproxy.Proxy, how faultproxy.How) func(*testing.T) {
		p.CutAll(how)
		return func(*testing.T) {}
	}, func(t *testing.T, err error, rows int) {
		if err == nil || errors.Is(err, ErrCommitUnknown) {
			t.Errorf("Commit on a connection cut before COMMIT was sent: %v, want an error that is not ErrCommitUnknown", err)
		}
		if rows != 0 {
			t.Errorf("the server has %d rows, want 0", rows)
		}
	})
}

// commitThroughProxy runs, for each way of cutting a connection and each inner driver, a
// transaction that inserts a row and commits through a proxy: cut acts on the proxy before the
// Commit and returns what to wait for after it; check judges Commit's error and the rows the
// server then has.
func commitThroughProxy(t *testing.T, cut func(*faultproxy.Proxy, faultproxy.How) func(*testing.T), check func(t *testing.T, err error, rows int)) {
	for _, how := range []faultproxy.How{faultproxy.RST, faultproxy.FIN} {
		t.Run(how.String(), func(t *testing.T) {
			forEachDriver(t, func(t *testing.T, drv string) {
				p, base := proxied(t)
				withPG(t, base, drv, oneAtATime, func(t *testing.T, e *pgEnv) {
					table := pgTable(t, e.adm, "id int")
					tx := mustBegin(t, e.db)
					if _, err := tx.Exec("INSERT INTO " + table + " VALUES (1)"); err != nil {
						t.Fatal(err)
					}
					after := cut(p, how)
					err := tx.Commit()
					after(t)
					check(t, err, countRows(t, e.adm, table))
				})
			})
		})
	}
}

// A statement whose backend is terminated while it runs may have done (and committed) part of
// its work: it must fail, not run again on another connection. A procedure that commits and then
// sleeps is terminated during the sleep; its row must be there exactly once.
func TestStatementTerminatedWhileRunningIsNotRunAgain(t *testing.T) {
	runPG(t, oneAtATime, func(t *testing.T, e *pgEnv) {
		table := pgTable(t, e.adm, "id int")
		proc := pgObject(t, e.adm, "PROCEDURE", "() LANGUAGE plpgsql AS $$ BEGIN INSERT INTO "+table+
			" VALUES (1); COMMIT; PERFORM pg_sleep(3); END $$")
		if _, err := e.db.Exec("SELECT 1"); err != nil { // the CALL then runs on a reused connection
			t.Fatal(err)
		}
		before := e.c.Stats()
		done := make(chan error, 1)
		go func() {
			_, err := e.db.Exec("CALL " + proc + "()")
			done <- err
		}()
		waitFor(t, "the procedure sleeping", func() bool {
			return activeQueries(t, e.adm, e.app, "pg_sleep") == 1 || activeQueries(t, e.adm, e.app, "CALL") == 1
		})
		waitFor(t, "the first row committed", func() bool { return countRows(t, e.adm, table) == 1 })
		var pid int
		if err := e.adm.QueryRow("SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'", e.app).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		killBackend(t, e.adm, pid)
		err := <-done
		if err == nil {
			t.Error("the caller saw success for a statement whose backend was terminated while it ran")
		}
		if n := countRows(t, e.adm, table); n != 1 {
			t.Errorf("%d rows: the procedure ran %d times", n, n)
		}
		if got := e.c.Stats().Admitted - before.Admitted; got != 1 {
			t.Errorf("admitted %d times, want 1", got)
		}
	})
}

// An autocommit statement sent on a connection that is then cut (after the server answered, or
// after it got part of the statement) may have run: the caller must see the failure, and it must
// not run again. pgx without arguments and lib/pq on a clean close report driver.ErrBadConn here.
func TestAutocommitStatementCutAfterItWasSentIsNotReplayed(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		p, base := proxied(t)
		withPG(t, base, drv, oneAtATime, func(t *testing.T, e *pgEnv) {
			table := pgTable(t, e.adm, "id int")
			if _, err := e.db.Exec("SELECT 1"); err != nil {
				t.Fatal(err)
			}
			insert := "INSERT INTO " + table + " VALUES (1)"
			fired := p.Arm(faultproxy.Rule{Match: []byte(insert), When: faultproxy.AfterResponse, How: faultproxy.FIN})
			_, err := e.db.Exec(insert)
			awaitFired(t, fired)
			if err == nil {
				t.Error("the caller saw success although the connection was cut after the statement was sent")
			}
			if n := countRows(t, e.adm, table); n > 1 {
				t.Errorf("%d rows: the statement ran %d times", n, n)
			}
		})
	})
}

// A connection the server closed while it was idle is found before anything is written to it,
// and the statement runs on another connection without the caller noticing.
func TestStatementOnConnectionKilledWhileIdleRunsOnceElsewhere(t *testing.T) {
	runPG(t, oneAtATime, func(t *testing.T, e *pgEnv) {
		table := pgTable(t, e.adm, "id int")
		pid := backendPID(t, e.db)
		killBackend(t, e.adm, pid)
		if _, err := e.db.Exec("INSERT INTO " + table + " VALUES (1)"); err != nil {
			t.Errorf("statement after the idle connection was killed: %v", err)
		}
		if n := countRows(t, e.adm, table); n != 1 {
			t.Errorf("%d rows, want 1", n)
		}
	})
}

// A statement whose write failed sent nothing and runs on a new connection, as soon as the
// broken one is closed: the driver's farewell (pgx's Terminate, after which it waits for the
// server to hang up) reaches the server, and the cleanup does not wait for drivers.CleanupWait
// (15 s) with the only permit and connection slot. The write fails here by a deadline in the past,
// as it does when a caller's context ends while the driver writes.
func TestStatementWhoseWriteFailedRunsElsewhereWithoutWaitingForTheCleanup(t *testing.T) {
	runPG(t, oneAtATime, func(t *testing.T, e *pgEnv) {
		table := pgTable(t, e.adm, "id int")
		backendPID(t, e.db)
		sock := idleSocket(e.c)
		if sock == nil {
			t.Fatal("no socket of gated's on the idle connection")
		}
		sock.Conn.SetWriteDeadline(time.Now().Add(-time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := e.db.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1)"); err != nil {
			t.Errorf("statement whose write failed, within 5 s: %v", err)
		}
		if n := countRows(t, e.adm, table); n != 1 {
			t.Errorf("%d rows, want 1", n)
		}
	})
}

// Closing a prepared statement and migrating the table must not break later queries of the same
// text: unprepared queries never run on a statement the application prepared, and the closed
// statement's copies are gone before the connection's next operation.
func TestClosedStatementDoesNotPoisonQueriesAfterAMigration(t *testing.T) {
	runPG(t, oneAtATime, func(t *testing.T, e *pgEnv) {
		table := pgTable(t, e.adm, "id int")
		query := "SELECT * FROM " + table
		st, err := e.db.Prepare(query)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Exec(); err != nil {
			t.Fatal(err)
		}
		st.Close()
		if _, err := e.adm.Exec("ALTER TABLE " + table + " ADD COLUMN v int"); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			rows, err := e.db.Query(query)
			if err != nil {
				t.Fatalf("query %d after Stmt.Close and ALTER TABLE: %v", i, err)
			}
			cols, _ := rows.Columns()
			rows.Close()
			if len(cols) != 2 {
				t.Errorf("query %d: columns %v, want 2", i, cols)
			}
		}
		var stmts int
		// pgx names the statements of its own cache stmtcache_<hash>; those are not the application's.
		if err := e.db.QueryRow("SELECT count(*) FROM pg_prepared_statements WHERE statement = $1 AND name NOT LIKE 'stmtcache\\_%'", query).Scan(&stmts); err != nil {
			t.Fatal(err)
		}
		if stmts != 0 {
			t.Errorf("%d prepared statements for the closed statement's text remain on the connection", stmts)
		}
	})
}

// DISCARD ALL (or DEALLOCATE ALL) drops the server's prepared statements: later queries of a
// prepared text must still work.
func TestQueriesWorkAfterDiscardAll(t *testing.T) {
	runPG(t, oneAtATime, func(t *testing.T, e *pgEnv) {
		table := pgTable(t, e.adm, "id int")
		query := "SELECT * FROM " + table
		st, err := e.db.Prepare(query)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, err := st.Exec(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.Exec("DISCARD ALL"); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if _, err := e.db.Exec(query); err != nil {
				t.Errorf("unprepared query %d after DISCARD ALL: %v", i, err)
			}
			if _, err := st.Exec(); err != nil {
				t.Errorf("prepared statement %d after DISCARD ALL: %v", i, err)
			}
		}
	})
}

// A statement still open when a migration changes its result type fails once at the server with
// 0A000 ("cached plan must not change result type"); gated prepares it again and runs it once
// more when nothing else ran in the binding.
func TestOpenStatementIsPreparedAgainAfterAMigration(t *testing.T) {
	runPG(t, oneAtATime, func(t *testing.T, e *pgEnv) {
		table := pgTable(t, e.adm, "id int")
		st, err := e.db.Prepare("SELECT * FROM " + table)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, err := st.Exec(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.adm.Exec("ALTER TABLE " + table + " ADD COLUMN v int"); err != nil {
			t.Fatal(err)
		}
		rows, err := st.Query()
		if err != nil {
			t.Fatalf("open statement after ALTER TABLE: %v", err)
		}
		cols, _ := rows.Columns()
		rows.Close()
		if len(cols) != 2 {
			t.Errorf("columns %v, want 2", cols)
		}
	})
}

// lib/pq's COPY statement works once per statement: a second COPY on the same physical connection
// must get a new one.
func TestCopyInTwiceOnOneConnection(t *testing.T) {
	withPG(t, "", "postgres", oneAtATime, func(t *testing.T, e *pgEnv) {
		table := pgTable(t, e.adm, "id int")
		for i := range 2 {
			tx := mustBegin(t, e.db)
			st, err := tx.Prepare(pq.CopyIn(table, "id"))
			if err != nil {
				t.Fatalf("COPY %d: prepare: %v", i, err)
			}
			if _, err := st.Exec(i); err != nil {
				t.Fatalf("COPY %d: row: %v", i, err)
			}
			if _, err := st.Exec(); err != nil {
				t.Fatalf("COPY %d: end: %v", i, err)
			}
			st.Close()
			if err := tx.Commit(); err != nil {
				t.Fatalf("COPY %d: commit: %v", i, err)
			}
		}
		if n := countRows(t, e.adm, table); n != 2 {
			t.Errorf("%d rows, want 2", n)
		}
	})
}

// panicValuer's Value panics, as a caller's own type may.
type panicValuer struct{}

func (panicValuer) Value() (driver.Value, error) { panic("gated test: Value panics") }

// A panic in an argument's Value method, recovered by the caller (as net/http recovers every
// handler), must not take the permit with it: database/sql never returns a connection whose call
// panicked.
func TestPanicInArgumentValueKeepsNoPermit(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=0", func(t *testing.T, e *pgEnv) {
		for _, op := range []struct {
			name string
			run  func() error
		}{
			{"Query", func() error { _, err := e.db.Query("SELECT $1::text", panicValuer{}); return err }},
			{"Exec", func() error { _, err := e.db.Exec("SELECT $1::text", panicValuer{}); return err }},
		} {
			recovered := func() (r any) {
				defer func() { r = recover() }()
				op.run()
				return nil
			}()
			if recovered == nil {
				t.Fatalf("%s: Value's panic did not reach the caller", op.name)
			}
			waitFor(t, "the permit back", func() bool { return e.c.Stats().Running == 0 })
			if _, err := e.db.Exec("SELECT 1"); err != nil {
				t.Errorf("after a panic in %s: %v", op.name, err)
			}
		}
	})
}

// When an idle connection fails its check before reuse under a partition (pgx pings it after a
// second of idleness), its cleanup keeps the permit (I4): the next operation waits in the gate,
// visible and bounded by gate_queue_wait, not invisibly inside the pool.
func TestPermitFollowsTheCleanupOfAConnectionThatFailsItsReuseCheck(t *testing.T) {
	p, base := proxied(t)
	withPG(t, base, "pgx", "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_queue_wait=300ms", func(t *testing.T, e *pgEnv) {
		if _, err := e.db.Exec("SELECT 1"); err != nil {
			t.Fatal(err)
		}
		idleSince := time.Now()
		waitFor(t, "1.1s of idleness", func() bool { return time.Since(idleSince) > 1100*time.Millisecond })
		p.Blackhole(true)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := e.db.ExecContext(ctx, "SELECT 1")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "gated: ") {
			t.Errorf("operation whose connection's reuse check timed out: %v, want a gated error wrapping context.DeadlineExceeded", err)
		}
		if s := e.c.Stats(); s.Running != 1 {
			t.Errorf("Running = %d while the failed connection is being closed, want 1 (the permit follows the cleanup)", s.Running)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		_, err = e.db.ExecContext(ctx, "SELECT 1")
		cancel()
		if !errors.Is(err, ErrAdmissionTimeout) {
			t.Errorf("next operation: %v, want ErrAdmissionTimeout after waiting in the gate", err)
		}
		p.Blackhole(false)
		awaitCleanup(t, e.c)
	})
}

// lib/pq cannot interrupt a blocked read: during a partition an operation would wait as long as
// it lasts. gated cuts the socket's calls short once the context ended, and keeps the permit
// until the connection's cleanup ended.
func TestLibPQOperationReturnsAtItsDeadlineDuringAPartition(t *testing.T) {
	p, base := proxied(t)
	withPG(t, base, "postgres", oneAtATime, func(t *testing.T, e *pgEnv) {
		if _, err := e.db.Exec("SELECT 1"); err != nil {
			t.Fatal(err)
		}
		p.Blackhole(true)
		done := make(chan struct{})
		var err error
		go func() {
			defer close(done)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err = e.db.ExecContext(ctx, "SELECT 1")
		}()
		within(t, "a lib/pq operation with a 300ms deadline", 10*time.Second, done)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want an error wrapping context.DeadlineExceeded", err)
		}
		if s := e.c.Stats(); s.Running != 1 {
			t.Errorf("Running = %d while the connection's cleanup waits for the partition, want 1", s.Running)
		}
		p.Blackhole(false)
		awaitCleanup(t, e.c)
	})
}

// lib/pq: closing the DB during a partition returns at once: idle connections are closed without
// waiting for the server (it frees their statements itself), in parallel.
func TestLibPQCloseDuringAPartitionReturnsPromptly(t *testing.T) {
	p, base := proxied(t)
	db, c, _ := openPGAt(t, base, "postgres", "gate_max_conns=2&gate_concurrent=2")
	tx1, tx2 := mustBegin(t, db), mustBegin(t, db)
	tx1.Exec("SELECT 1")
	tx2.Exec("SELECT 1")
	tx1.Commit()
	tx2.Commit()
	st, err := db.Prepare("SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Exec(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Pool.Idle != 2 {
		t.Fatalf("want 2 idle connections, have %+v", s.Pool)
	}
	p.Blackhole(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		db.Close()
	}()
	within(t, "db.Close", 5*time.Second, done)
	p.Blackhole(false)
}

// lib/pq abandons a connection that does not finish connecting within connect_timeout: gated
// must close it at once, not wait for a server that never answered.
func TestLibPQConnectTimeoutIsNotExtendedByGated(t *testing.T) {
	p, base := proxied(t)
	p.Blackhole(true)
	db, c, _ := openPGAt(t, base+"&connect_timeout=1", "postgres", oneAtATime)
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = db.Ping()
	}()
	within(t, "Ping with connect_timeout=1 against a server that does not answer", 10*time.Second, done)
	if err == nil {
		t.Error("Ping succeeded through a blackhole")
	}
	if s := c.Stats(); s.Pool.ConnectErrors != 1 {
		t.Errorf("ConnectErrors = %d, want 1", s.Pool.ConnectErrors)
	}
	p.Blackhole(false)
}

// A server slower to accept a connection than any caller's deadline (a flood of connection
// attempts, an overloaded host) still gets the pool its connections: the dial a caller left
// goes on, and the next caller, with the same short deadline, is served by the connection it
// opened. Were the dial cut short with its caller, every attempt would be thrown away, and
// under overload each of them costs the server a backend's start-up.
func TestDialSlowerThanTheCallersDeadlineServesTheNextCaller(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		p, base := proxied(t)
		p.SlowDials(time.Second)
		db, c, _ := openPGAt(t, base, drv, oneAtATime)
		ping := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			return db.PingContext(ctx)
		}
		if err := ping(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Ping while the server takes a second to accept: %v, want the deadline", err)
		}
		waitFor(t, "the connection the first caller left opened for the pool", func() bool { return c.Stats().Pool.Idle == 1 })
		if err := ping(); err != nil {
			t.Fatalf("Ping with an idle connection: %v", err)
		}
		if s := c.Stats().Pool; s.Opened != 1 || s.ConnectCanceled != 1 || s.ConnectErrors != 0 {
			t.Errorf("pool stats %+v, want 1 opened, 1 canceled, no connect error", s)
		}
	})
}

// A connection attempt cut short by the caller's own deadline is not the server's failure:
// ConnectCanceled counts it, ConnectErrors does not.
func TestConnectCutShortByTheCallerIsNotAConnectError(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		p, base := proxied(t)
		p.Blackhole(true)
		db, c, _ := openPGAt(t, base, drv, oneAtATime)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			t.Fatal("Ping succeeded through a blackhole")
		}
		if s := c.Stats(); s.Pool.ConnectErrors != 0 || s.Pool.ConnectCanceled != 1 {
			t.Errorf("ConnectErrors = %d, ConnectCanceled = %d; want 0 and 1", s.Pool.ConnectErrors, s.Pool.ConnectCanceled)
		}
		p.Blackhole(false)
	})
}
