package gated

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"
)

func TestRoundUpMsStaysWithinAQuarter(t *testing.T) {
	prev := int64(0)
	for ms := int64(1); ms < 200000; ms++ {
		r := roundUpMs(ms)
		if r < ms || float64(r) > 1.25*float64(ms) {
			t.Fatalf("roundUpMs(%d) = %d, want within [%d, %d]", ms, r, ms, ms*5/4)
		}
		if r < prev {
			t.Fatalf("roundUpMs(%d) = %d, below roundUpMs(%d) = %d", ms, r, ms-1, prev)
		}
		prev = r
	}
	if a, b := roundUpMs(999), roundUpMs(950); a != b {
		t.Errorf("deadlines of 950 ms and 999 ms map to %d and %d, want one value", b, a)
	}
}

// showTimeout reads statement_timeout (or another setting) as a duration; "0" is zero.
func showTimeout(t *testing.T, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, ctx context.Context, setting string) time.Duration {
	t.Helper()
	var v string
	if err := q.QueryRowContext(ctx, "SHOW "+setting).Scan(&v); err != nil {
		t.Fatalf("SHOW %s: %v", setting, err)
	}
	if v == "0" {
		return 0
	}
	v = strings.Replace(strings.Replace(v, "min", "m", 1), "d", "*24h", 1)
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("SHOW %s = %q: %v", setting, v, err)
	}
	return d
}

// checkReused checks that every permit is back and no physical connection was opened since
// opened was read: the failure left the connection healthy, and it was reused.
func checkReused(t *testing.T, e *pgEnv, opened int64) {
	t.Helper()
	waitIdle(t, e.c)
	if _, err := e.db.Exec("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if s := e.c.Stats(); s.Pool.Opened != opened || s.Running != 0 {
		t.Errorf("after the server's error: opened %d connections (was %d), running %d; want the connection reused", s.Pool.Opened, opened, s.Running)
	}
}

func TestStatementTimeoutStopsTheStatementAtTheServer(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_statement_timeout=200ms", func(t *testing.T, e *pgEnv) {
		if _, err := e.db.Exec("SELECT 1"); err != nil {
			t.Fatal(err)
		}
		opened := e.c.Stats().Pool.Opened
		start := time.Now()
		_, err := e.db.Exec("SELECT pg_sleep(5)") // no context deadline
		if code := driverSQLState(e.drv, err); code != "57014" {
			t.Fatalf("pg_sleep(5) with gate_statement_timeout=200ms: %v (SQLSTATE %q), want 57014", err, code)
		}
		t.Logf("stopped after %v", time.Since(start))
		checkReused(t, e, opened)

		tx := mustBegin(t, e.db)
		if _, err := tx.Exec("SELECT pg_sleep(5)"); driverSQLState(e.drv, err) != "57014" {
			t.Errorf("pg_sleep(5) in a transaction: %v, want 57014", err)
		}
		tx.Rollback()
		checkReused(t, e, opened)
	})
}

func TestStatementTimeoutFollowsTheDeadline(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_statement_timeout=deadline", func(t *testing.T, e *pgEnv) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		left := time.Until(mustDeadline(t, ctx)) // before BEGIN: at least what is left when it runs
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := showTimeout(t, tx, ctx, "statement_timeout"); got <= 0 || got > left {
			t.Errorf("statement_timeout in a transaction begun with 300 ms left = %v, want in (0, %v]", got, left)
		}
		tx.Rollback()

		// Outside a transaction: at least the time left, at most a quarter more.
		ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel2()
		if got := showTimeout(t, e.db, ctx2, "statement_timeout"); got < time.Millisecond || got > 375*time.Millisecond {
			t.Errorf("statement_timeout of a statement with 300 ms left = %v, want in [1ms, 375ms]", got)
		}
		opened := e.c.Stats().Pool.Opened
		// Without a deadline there is no limit, in or out of a transaction.
		if got := showTimeout(t, e.db, context.Background(), "statement_timeout"); got != 0 {
			t.Errorf("statement_timeout without a deadline = %v, want 0", got)
		}
		tx = mustBegin(t, e.db)
		if got := showTimeout(t, tx, context.Background(), "statement_timeout"); got != 0 {
			t.Errorf("statement_timeout in a transaction without a deadline = %v, want 0", got)
		}
		tx.Rollback()
		checkReused(t, e, opened)
	})
}

func TestStatementTimeoutDeadlineCapApplies(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_statement_timeout=deadline:2s", func(t *testing.T, e *pgEnv) {
		if got := showTimeout(t, e.db, context.Background(), "statement_timeout"); got != 2*time.Second {
			t.Errorf("statement_timeout without a deadline = %v, want the cap 2s", got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := showTimeout(t, tx, ctx, "statement_timeout"); got != 2*time.Second {
			t.Errorf("statement_timeout with a minute left = %v, want the cap 2s", got)
		}
		tx.Rollback()
	})
}

func TestLockTimeoutGivesLockNotAvailable(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_lock_timeout=200ms", func(t *testing.T, e *pgEnv) {
		table, holder := lockedRow(t, e.adm)
		if _, err := e.db.Exec("SELECT 1"); err != nil {
			t.Fatal(err)
		}
		opened := e.c.Stats().Pool.Opened
		_, err := e.db.Exec("UPDATE " + table + " SET v = 1 WHERE id = 1")
		if code := driverSQLState(e.drv, err); code != "55P03" {
			t.Fatalf("UPDATE of a locked row: %v (SQLSTATE %q), want 55P03", err, code)
		}
		checkReused(t, e, opened)

		tx := mustBegin(t, e.db)
		if _, err := tx.Exec("SELECT v FROM " + table + " WHERE id = 1 FOR UPDATE"); driverSQLState(e.drv, err) != "55P03" {
			t.Errorf("SELECT FOR UPDATE of a locked row in a transaction: %v, want 55P03", err)
		}
		tx.Rollback()
		checkReused(t, e, opened)
		holder.Rollback()
	})
}

func mustDeadline(t *testing.T, ctx context.Context) time.Time {
	t.Helper()
	d, ok := ctx.Deadline()
	if !ok {
		t.Fatal("no deadline")
	}
	return d
}

// sentBytes returns what the pool's one idle physical connection has written to its socket.
func sentBytes(t *testing.T, c *Connector) int64 {
	t.Helper()
	waitIdle(t, c)
	c.pool.mu.Lock()
	defer c.pool.mu.Unlock()
	if len(c.pool.idle) != 1 {
		t.Fatalf("%d idle physical connections, want 1", len(c.pool.idle))
	}
	return c.pool.idle[0].inner.Sent()
}

// The common path of gate_statement_timeout=deadline costs no round trip: statements outside a
// transaction under the same per-call deadline write exactly the bytes they write with the
// setting off (the session value is already in force), and a transaction's SET LOCAL travels in
// BEGIN's own message with pgx.
func TestDeadlineSettingSendsNothingMoreOnTheCommonPath(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		perCall := func(params string, op func(ctx context.Context, db *sql.DB) error) int64 {
			db, c, _ := openPG(t, drv, "gate_max_conns=1&"+params)
			run := func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if err := op(ctx, db); err != nil {
					t.Fatal(err)
				}
			}
			run() // the first call opens the connection and may set the session value
			before := sentBytes(t, c)
			for range 10 {
				run()
			}
			return (sentBytes(t, c) - before) / 10
		}
		selectOne := func(ctx context.Context, db *sql.DB) error {
			var n int
			return db.QueryRowContext(ctx, "SELECT 1").Scan(&n)
		}
		off, dl := perCall("gate_statement_timeout=off", selectOne), perCall("gate_statement_timeout=deadline", selectOne)
		if dl != off {
			t.Errorf("SELECT 1 under a 1 s deadline writes %d bytes with gate_statement_timeout=deadline, %d with off: want no extra statement", dl, off)
		}
		if drv == "pgx" {
			tx := func(ctx context.Context, db *sql.DB) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				return tx.Commit()
			}
			off, dl := perCall("gate_statement_timeout=off", tx), perCall("gate_statement_timeout=deadline", tx)
			// "; set local statement_timeout = 999" and its digits: one message, no more.
			if extra := dl - off; extra <= 0 || extra > int64(len("; set local statement_timeout = 1000")) {
				t.Errorf("BEGIN; COMMIT writes %d bytes with deadline, %d with off: want SET LOCAL inside BEGIN's message", dl, off)
			}
		}
	})
}

// A statement of the application that changes the session's statement_timeout (SET, RESET,
// DISCARD ALL) must not leave gated believing its own deadline value is still in force.
func TestDeadlineModeNoticesTheApplicationChangingStatementTimeout(t *testing.T) {
	runPG(t, "gate_max_conns=1&gate_concurrent=1&gate_queue=1&gate_statement_timeout=deadline", func(t *testing.T, e *pgEnv) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := e.db.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.ExecContext(ctx, "SET statement_timeout = 1"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.ExecContext(ctx, "SELECT pg_sleep(0.05)"); err != nil {
			t.Errorf("statement under a 10s deadline after the application set statement_timeout = 1ms: %v", err)
		}
	})
}

func TestContainsFold(t *testing.T) {
	for _, c := range []struct {
		s, w string
		want bool
	}{
		{"SET Statement_Timeout = 1", "statement_timeout", true},
		{"DISCARD ALL", "discard", true},
		{"select 1", "reset", false},
		{"", "reset", false},
	} {
		if got := containsFold(c.s, c.w); got != c.want {
			t.Errorf("containsFold(%q, %q) = %v", c.s, c.w, got)
		}
	}
}
