package gated

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// TestShortDeadlinesOnAHealthyServerAreNotServerFailures: 200 operations under deadlines from
// 0 to 4 ms, shorter than opening a connection and often than a reuse check, on a healthy
// server. Whatever error the driver gives when the deadline cuts a dial or a reset ping short
// (an i/o timeout that fires a moment before ctx.Err is set), it is the caller's: counted in
// ConnectCanceled (and ClosedCanceled), never in ConnectErrors or ClosedDeadIdle, and the
// operation's error says the deadline passed.
func TestShortDeadlinesOnAHealthyServerAreNotServerFailures(t *testing.T) {
	runPG(t, "gate_max_conns=4&gate_concurrent=4&gate_queue=200&gate_queue_wait=10s", func(t *testing.T, e *pgEnv) {
		const ops, workers = 200, 4
		warm(t, e, 4)
		var (
			mu   sync.Mutex
			errs []error
			wg   sync.WaitGroup
		)
		for w := range workers {
			wg.Go(func() {
				for i := w; i < ops; i += workers {
					// Every fourth runs without a deadline, so that idle connections exist and
					// get reset under a short deadline by the next one.
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					if i%4 != 0 {
						ctx, cancel = context.WithTimeout(ctx, time.Duration(i%40)*100*time.Microsecond)
					}
					// The statement lasts a millisecond, so that the shortest deadlines end it
					// whatever the machine's speed; the connections it leaves broken are dialed
					// again, and reset, under the deadlines that follow.
					var one string
					err := e.db.QueryRowContext(ctx, "SELECT pg_sleep(0.001)::text").Scan(&one)
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
		waitIdle(t, e.c)
		for _, err := range errs {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("an operation cut short by its deadline failed with %v, which does not match context.DeadlineExceeded", err)
			}
		}
		s := e.c.Stats().Pool
		t.Logf("%d of %d operations cut short; pool %+v", len(errs), ops, s)
		if s.ConnectErrors != 0 {
			t.Errorf("ConnectErrors = %d on a healthy server, want 0 (ConnectCanceled %d)", s.ConnectErrors, s.ConnectCanceled)
		}
		if s.ClosedDeadIdle != 0 {
			t.Errorf("ClosedDeadIdle = %d on a healthy server, want 0 (ClosedCanceled %d)", s.ClosedDeadIdle, s.ClosedCanceled)
		}
		if len(errs) == 0 {
			t.Error("no operation was cut short: the deadlines did not test anything")
		}
	})
}

// TestTerminatedIdleBackendsAreDeadIdle: connections whose backends pg_terminate_backend ended
// while they were idle are found dead at their next use, and counted as ClosedDeadIdle, not as
// canceled, whatever the operation's deadline.
func TestTerminatedIdleBackendsAreDeadIdle(t *testing.T) {
	runPG(t, "gate_max_conns=3&gate_concurrent=3", func(t *testing.T, e *pgEnv) {
		ctx := context.Background()
		warm(t, e, 3)
		var n int
		if err := e.adm.QueryRow(`SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity WHERE application_name = $1`, e.app).Scan(&n); err != nil || n != 3 {
			t.Fatalf("terminated %d backends: %v", n, err)
		}
		for i := range 3 {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var one int
			err := e.db.QueryRowContext(cctx, "SELECT 1").Scan(&one)
			cancel()
			if err != nil {
				t.Fatalf("operation %d after the backends were terminated: %v", i, err)
			}
		}
		waitIdle(t, e.c)
		s := e.c.Stats().Pool
		if s.ClosedDeadIdle < 1 || s.ClosedCanceled != 0 || s.ConnectCanceled != 0 {
			t.Errorf("after 3 idle backends were terminated: ClosedDeadIdle %d (want ≥ 1), ClosedCanceled %d, ConnectCanceled %d (want 0)",
				s.ClosedDeadIdle, s.ClosedCanceled, s.ConnectCanceled)
		}
	})
}

// warm opens n physical connections at once and leaves them idle.
func warm(t *testing.T, e *pgEnv, n int) {
	t.Helper()
	ctx := context.Background()
	var txs []*sql.Tx
	for range n {
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
	}
	for _, tx := range txs {
		tx.Rollback()
	}
	waitIdle(t, e.c)
	if s := e.c.Stats().Pool; s.Idle != n {
		t.Fatalf("idle = %d, want %d", s.Idle, n)
	}
}

// timedOutConnector is an inner driver whose Connect fails as a dial does when the socket's
// deadline, the context's, has passed: an i/o timeout, returned before the context's own timer
// has set ctx.Err.
type timedOutConnector struct{}

func (timedOutConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
}
func (c timedOutConnector) Driver() driver.Driver                          { return c }
func (timedOutConnector) Open(string) (driver.Conn, error)                 { return nil, errors.New("unused") }
func (c timedOutConnector) OpenConnector(string) (driver.Connector, error) { return c, nil }

func init() { sql.Register("gated-test-timed-out", timedOutConnector{}) }

// pastDeadline is a context whose deadline has passed while its Err is still nil: the moment
// between a socket's deadline firing and the context's timer, made to last.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestDialTimedOutAtTheCallersDeadlineIsTheCallers: a dial that fails with an i/o timeout once
// the caller's deadline has passed, before ctx.Err is set, is counted in ConnectCanceled (and
// reported as EventConnectCanceled), not in ConnectErrors, is not logged, and its error matches
// context.DeadlineExceeded.
func TestDialTimedOutAtTheCallersDeadlineIsTheCallers(t *testing.T) {
	rec := &recorder{}
	h := &logRecorder{}
	c, err := NewConnector(&Config{Driver: "gated-test-timed-out", MaxConns: 1, Observer: rec, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	db := OpenDB(c)
	err = db.PingContext(pastDeadline{context.Background()})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want an error matching context.DeadlineExceeded", err)
	}
	db.Close() // writes any log line still pending
	if s := c.Stats().Pool; s.ConnectErrors != 0 || s.ConnectCanceled != 1 {
		t.Errorf("ConnectErrors = %d, ConnectCanceled = %d; want 0 and 1", s.ConnectErrors, s.ConnectCanceled)
	}
	if rec.n(EventConnectFailed) != 0 || rec.n(EventConnectCanceled) != 1 {
		t.Errorf("events: failed %d, canceled %d; want 0 and 1", rec.n(EventConnectFailed), rec.n(EventConnectCanceled))
	}
	if recs := h.records("gated: opening a physical connection failed"); len(recs) != 0 {
		t.Errorf("the caller's own deadline was logged as a connection failure: %v", recs)
	}
}
