package mysqltest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/testwait"
	"github.com/gatedsql/gated/mysqltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var tableSeq atomic.Int64

// gatedDB opens a gated *sql.DB with gate_driver=mysql and params (gate_ keys) on the test server.
// Its cleanup checks that every permit and connection came back, then closes it.
func gatedDB(t *testing.T, params string) (*sql.DB, *gated.Connector) {
	t.Helper()
	dsn := mysqltest.DSN(t)
	sep := "?"
	if strings.Contains(dsn[strings.LastIndex(dsn, "@")+1:], "?") {
		sep = "&"
	}
	db, err := gated.Open(dsn + sep + "gate_driver=mysql&" + params)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := gated.FromDB(db)
	if !ok {
		t.Fatal("FromDB: not a gated DB")
	}
	t.Cleanup(func() {
		waitFor(t, "every permit back and no connection in use", func() bool {
			s := c.Stats()
			return s.Running == 0 && s.Waiting == 0 && s.Pool.InUse == 0
		})
		s := c.Stats()
		if s.Pool.Open != s.Pool.Idle {
			t.Errorf("Pool.Open = %d, Pool.Idle = %d after every operation ended", s.Pool.Open, s.Pool.Idle)
		}
		var sum int64
		for r := range gated.CloseReasons() {
			sum += s.Pool.ClosedFor(r)
		}
		if s.Pool.Closed != sum {
			t.Errorf("Pool.Closed = %d is not the sum of its reasons: %+v", s.Pool.Closed, s.Pool)
		}
		if s.Pool.Opened-s.Pool.Closed != int64(s.Pool.Open) {
			t.Errorf("Pool.Opened %d - Pool.Closed %d != Pool.Open %d", s.Pool.Opened, s.Pool.Closed, s.Pool.Open)
		}
		db.Close()
	})
	return db, c
}

// plainDB opens the server without gated, to watch and disturb it.
func plainDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", mysqltest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// table makes a table with a unique name, dropped at cleanup.
func table(t *testing.T, plain *sql.DB) string {
	t.Helper()
	name := fmt.Sprintf("gated_mysql_%d_%d", time.Now().UnixNano(), tableSeq.Add(1))
	if _, err := plain.Exec("CREATE TABLE " + name + " (id INT PRIMARY KEY, v TEXT) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := plain.Exec("DROP TABLE " + name); err != nil {
			t.Error(err)
		}
	})
	return name
}

// waitFor polls cond until it holds (testwait.For).
var waitFor = testwait.For

func count(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func count2(t *testing.T, c *sql.Conn, query string, args ...any) int {
	t.Helper()
	var n int
	if err := c.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCommitAndRollbackReturnThePermit(t *testing.T) {
	plain := plainDB(t)
	tbl := table(t, plain)
	db, c := gatedDB(t, "gate_concurrent=1&gate_queue=0")
	ctx := context.Background()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO " + tbl + " VALUES (1, 'a')"); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().Running; got != 1 {
		t.Fatalf("Running = %d inside a transaction, want 1", got)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().Running; got != 0 {
		t.Fatalf("Running = %d after Commit, want 0", got)
	}

	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO " + tbl + " VALUES (2, 'b')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().Running; got != 0 {
		t.Fatalf("Running = %d after Rollback, want 0", got)
	}
	if n := count(t, plain, "SELECT COUNT(*) FROM "+tbl); n != 1 {
		t.Fatalf("%d rows, want 1 (the committed one)", n)
	}
	// B=1, Q=0: had either permit stayed taken, this would be refused.
	if n := count(t, db, "SELECT COUNT(*) FROM "+tbl+" WHERE id = 1"); n != 1 {
		t.Fatalf("committed row not found through gated")
	}
}

func TestRefusals(t *testing.T) {
	t.Run("full", func(t *testing.T) {
		db, c := gatedDB(t, "gate_concurrent=1&gate_queue=0")
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		_, err = db.Exec("SELECT 1")
		if !errors.Is(err, gated.ErrAdmissionFull) {
			t.Fatalf("second operation with B=1, Q=0: %v, want ErrAdmissionFull", err)
		}
		if s := c.Stats(); s.RejectedFull != 1 || s.Admitted != 1 {
			t.Fatalf("RejectedFull = %d, Admitted = %d, want 1 and 1", s.RejectedFull, s.Admitted)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		db, c := gatedDB(t, "gate_concurrent=1&gate_queue=1&gate_queue_wait=20ms")
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		_, err = db.Exec("SELECT 1")
		if !errors.Is(err, gated.ErrAdmissionTimeout) {
			t.Fatalf("second operation with B=1 held: %v, want ErrAdmissionTimeout", err)
		}
		if !gated.IsRejected(err) {
			t.Fatalf("IsRejected(%v) = false", err)
		}
		if s := c.Stats(); s.RejectedTimeout != 1 {
			t.Fatalf("RejectedTimeout = %d, want 1", s.RejectedTimeout)
		}
	})
}

func TestWaitsEnd(t *testing.T) {
	t.Run("served when the permit comes back", func(t *testing.T) {
		db, c := gatedDB(t, "gate_concurrent=1&gate_queue=1&gate_queue_wait=30s")
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			var one int
			done <- db.QueryRow("SELECT 1").Scan(&one)
		}()
		waitFor(t, "one waiter", func() bool { return c.Stats().Waiting == 1 })
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("the waiter: %v", err)
		}
		if s := c.Stats(); s.Admitted != 2 || s.WaitDuration <= 0 {
			t.Fatalf("Admitted = %d, WaitDuration = %v; want 2 and > 0", s.Admitted, s.WaitDuration)
		}
	})
	t.Run("canceled while waiting", func(t *testing.T) {
		db, c := gatedDB(t, "gate_concurrent=1&gate_queue=1&gate_queue_wait=30s")
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := db.ExecContext(ctx, "SELECT 1")
			done <- err
		}()
		waitFor(t, "one waiter", func() bool { return c.Stats().Waiting == 1 })
		cancel()
		err = <-done
		if !errors.Is(err, gated.ErrWaitCanceled) || !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled waiter: %v, want ErrWaitCanceled and context.Canceled", err)
		}
		if s := c.Stats(); s.Canceled != 1 || s.Waiting != 0 {
			t.Fatalf("Canceled = %d, Waiting = %d; want 1 and 0", s.Canceled, s.Waiting)
		}
	})
}

// TestCanceledStatementKeepsThePermitUntilTheServerStopped: with B=1, a
// canceled SELECT SLEEP(3) keeps its permit while MariaDB's process list still shows it running,
// and gives it back once gated's KILL QUERY took effect, within 1 s of the cancel (the statement
// alone would run 3 s). Three cancels in a row: the first opens gated's killing session.
func TestCanceledStatementKeepsThePermitUntilTheServerStopped(t *testing.T) {
	plain := plainDB(t)
	db, c := gatedDB(t, "gate_concurrent=1&gate_queue=0")
	for i := range 3 {
		returned, dropped, _ := cancelSleep(t, db, c, plain, nil, time.Second)
		t.Logf("cancel %d: the caller returned %v after the cancel; the permit came back after %v", i+1, returned, dropped)
		if s := c.Stats(); s.Pool.ClosedBroken != int64(i+1) {
			t.Fatalf("ClosedBroken = %d, want %d (the canceled connections)", s.Pool.ClosedBroken, i+1)
		}
		// The permit is usable again at once (B=1, Q=0).
		if n := count(t, db, "SELECT 1"); n != 1 {
			t.Fatal("SELECT 1 after the cancel")
		}
	}
}

// TestPermitHeldWhileTheServerRunsTheStatement makes the server's work outlast the cancel for
// certain: every new connection of the gated DB, so also gated's killing session, first waits for
// a named lock the test holds (GET_LOCK, then RELEASE_LOCK, in the value of a session variable
// the DSN sets). While the test holds
// it no kill can be sent: the process list shows the statement, and Running must stay 1. Once
// the test releases the lock, the kill goes out and the permit comes back.
func TestPermitHeldWhileTheServerRunsTheStatement(t *testing.T) {
	plain := plainDB(t)
	lock := fmt.Sprintf("gated-kill-lock-%d", time.Now().UnixNano())
	db, c := gatedDB(t, "gate_concurrent=1&gate_queue=0&gate_max_conn_idle_time=0&wait_timeout="+
		url.QueryEscape(fmt.Sprintf("GET_LOCK('%[1]s',10)*0+RELEASE_LOCK('%[1]s')*0+28800", lock)))
	if n := count(t, db, "SELECT 1"); n != 1 { // the statement's connection, opened without waiting
		t.Fatal("SELECT 1")
	}
	holder, err := plain.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if n := count2(t, holder, "SELECT GET_LOCK(?, 10)", lock); n != 1 {
		t.Fatalf("GET_LOCK = %d", n)
	}
	released := false
	release := func() {
		if !released {
			released = true
			count2(t, holder, "SELECT RELEASE_LOCK(?)", lock)
		}
	}
	defer release()
	returned, dropped, held := cancelSleep(t, db, c, plain, func(held int) bool {
		if held >= 3 {
			release()
		}
		return released
	}, 10*time.Second)
	t.Logf("the caller returned %v after the cancel; %d looks saw the permit held while the server ran the statement; permit back %v after the cancel",
		returned, held, dropped)
	if held < 3 {
		t.Fatalf("%d looks saw the permit held while the server ran the statement, want 3", held)
	}
}

// cancelSleep runs SELECT SLEEP(3) through db, cancels it once the server shows it, and polls
// Running and the process list until the permit is back, failing t if the permit came back while
// the server still showed the statement, or later than limit after the cancel. Before the permit
// is back, gate (when not nil) is called with the number of looks that saw the permit held while
// the statement ran; until it returns true, the permit must stay held. It returns how long the
// caller took to return and the permit to come back after the cancel, and that number.
func cancelSleep(t *testing.T, db *sql.DB, c *gated.Connector, plain *sql.DB, gate func(held int) bool, limit time.Duration) (returned, dropped time.Duration, held int) {
	t.Helper()
	marker := fmt.Sprintf("gated-kill-%d", time.Now().UnixNano())
	query := "SELECT SLEEP(3) /* " + marker + " */"
	shown := func() bool {
		return count(t, plain, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = ? AND COMMAND <> 'Sleep'", query) > 0
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		var r int
		done <- db.QueryRowContext(ctx, query).Scan(&r)
	}()
	waitFor(t, "the statement running on the server", shown)
	cancel()
	canceledAt := time.Now()
	err := <-done
	returned = time.Since(canceledAt)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled statement: %v, want context.Canceled", err)
	}
	// Running is read before the process list: once it is 0, the server must not show the
	// statement any more.
	for {
		running := c.Stats().Running
		still := shown()
		if running == 0 && still {
			t.Fatalf("the permit came back while the server still ran the statement")
		}
		if running == 0 {
			break
		}
		if still {
			held++
		}
		if gate != nil && !gate(held) {
			if running != 1 || !still {
				t.Fatalf("Running = %d, statement shown: %v, before the kill could be sent", running, still)
			}
		}
		if time.Since(canceledAt) > limit {
			t.Fatalf("Running = %d %v after the cancel (the process list shows the statement: %v)", running, time.Since(canceledAt), still)
		}
		time.Sleep(time.Millisecond)
	}
	dropped = time.Since(canceledAt)
	if shown() {
		t.Fatal("the server shows the statement after the permit came back")
	}
	return returned, dropped, held
}

// TestConnectionKilledWhileIdleIsReplaced: KILL CONNECTION on an idle pooled connection; the
// next operation runs on a new connection and succeeds, and the dead one is counted as found
// dead before reuse.
func TestConnectionKilledWhileIdleIsReplaced(t *testing.T) {
	plain := plainDB(t)
	db, c := gatedDB(t, "gate_concurrent=1&gate_max_conns=1&gate_queue=0")
	var id int64
	if err := db.QueryRow("SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Exec(fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed session gone", func() bool {
		return count(t, plain, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id) == 0
	})
	var id2 int64
	if err := db.QueryRow("SELECT CONNECTION_ID()").Scan(&id2); err != nil {
		t.Fatalf("first statement after the kill: %v", err)
	}
	if id2 == id {
		t.Fatalf("ran on the killed connection %d", id)
	}
	s := c.Stats()
	if s.Pool.ClosedDeadIdle != 1 || s.Pool.Opened != 2 {
		t.Fatalf("ClosedDeadIdle = %d, Opened = %d; want 1 and 2", s.Pool.ClosedDeadIdle, s.Pool.Opened)
	}
}

// TestCountersAddUp runs a mix of served, refused and canceled operations and checks that every
// attempt ends in exactly one counter.
func TestCountersAddUp(t *testing.T) {
	db, c := gatedDB(t, "gate_concurrent=2&gate_queue=2&gate_queue_wait=50ms")
	const n = 40
	var wg sync.WaitGroup
	var ok, full, timeout, canceled, other atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			if i%5 == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 30*time.Millisecond)
				defer cancel()
			}
			_, err := db.ExecContext(ctx, "SELECT SLEEP(0.05)")
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, gated.ErrAdmissionFull):
				full.Add(1)
			case errors.Is(err, gated.ErrAdmissionTimeout):
				timeout.Add(1)
			case errors.Is(err, gated.ErrWaitCanceled):
				canceled.Add(1)
			case errors.Is(err, context.DeadlineExceeded):
				ok.Add(1) // admitted, then the statement was cut short
			default:
				other.Add(1)
				t.Errorf("unexpected error: %v", err)
			}
		}()
	}
	wg.Wait()
	waitFor(t, "every permit back", func() bool { return c.Stats().Running == 0 })
	s := c.Stats()
	if got := s.Admitted + s.RejectedFull + s.RejectedTimeout + s.Canceled; got != n {
		t.Fatalf("Admitted %d + RejectedFull %d + RejectedTimeout %d + Canceled %d = %d, want %d",
			s.Admitted, s.RejectedFull, s.RejectedTimeout, s.Canceled, got, n)
	}
	if s.RejectedFull != full.Load() || s.RejectedTimeout != timeout.Load() || s.Canceled != canceled.Load() || s.Admitted != ok.Load() {
		t.Fatalf("Stats %+v disagree with the callers: ok %d, full %d, timeout %d, canceled %d",
			s, ok.Load(), full.Load(), timeout.Load(), canceled.Load())
	}
	t.Logf("admitted %d, full %d, timeout %d, canceled %d", s.Admitted, s.RejectedFull, s.RejectedTimeout, s.Canceled)
}

// TestShortDeadlinesOnAHealthyServerAreNotServerFailures: 200 operations under deadlines from 0
// to 4 ms, shorter than opening a MySQL session and often than a reuse check, on a healthy
// server: whatever the driver reports when the deadline cuts a dial or a check short, it counts
// in ConnectCanceled, never in ConnectErrors or ClosedDeadIdle, and the error says the deadline
// passed.
func TestShortDeadlinesOnAHealthyServerAreNotServerFailures(t *testing.T) {
	db, c := gatedDB(t, "gate_max_conns=4&gate_concurrent=4&gate_queue=200&gate_queue_wait=10s")
	const ops, workers = 200, 4
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < ops; i += workers {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if i%4 != 0 { // every fourth without a deadline: idle connections to reuse
					ctx, cancel = context.WithTimeout(ctx, time.Duration(i%40)*100*time.Microsecond)
				}
				// The statement lasts a millisecond, so that the shortest deadlines end it
				// whatever the machine's speed, and the connections it leaves are dialed again
				// under the deadlines that follow.
				var one int
				err := db.QueryRowContext(ctx, "SELECT SLEEP(0.001)").Scan(&one)
				cancel()
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "every permit back", func() bool { s := c.Stats(); return s.Running == 0 && s.Pool.InUse == 0 })
	for _, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("an operation cut short by its deadline failed with %v, which does not match context.DeadlineExceeded", err)
		}
	}
	s := c.Stats().Pool
	t.Logf("%d of %d operations cut short; pool %+v", len(errs), ops, s)
	if s.ConnectErrors != 0 || s.ClosedDeadIdle != 0 {
		t.Errorf("ConnectErrors = %d, ClosedDeadIdle = %d on a healthy server, want 0 (ConnectCanceled %d, ClosedCanceled %d)",
			s.ConnectErrors, s.ClosedDeadIdle, s.ConnectCanceled, s.ClosedCanceled)
	}
	if len(errs) == 0 {
		t.Error("no operation was cut short: the deadlines did not test anything")
	}
}
