package gated

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
)

// Helpers of the bulkhead contract suite (contract_*_test.go).

// checkQuiet ends every contract case (I7). Once nothing runs it checks that Running = Waiting = 0
// and no physical connection is in use (waitQuiet, which also runs one new operation), that every
// one of the B execution permits can be taken at once — B transactions begin without anybody
// waiting (WaitDuration unchanged) — and that they all come back when those transactions roll back.
// It also checks I3: nobody ever waited in database/sql's own pool.
func checkQuiet(t testing.TB, db *sql.DB, c *Connector) {
	t.Helper()
	waitQuiet(t, db, c)
	before := c.Stats()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	txs := make([]*sql.Tx, 0, before.Concurrent)
	defer func() {
		for _, tx := range txs {
			tx.Rollback()
		}
	}()
	for i := range before.Concurrent {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("once quiet, permit %d of B=%d is not available: %v", i+1, before.Concurrent, err)
		}
		txs = append(txs, tx)
	}
	if s := c.Stats(); s.Running != before.Concurrent || s.Waiting != 0 || s.WaitDuration != before.WaitDuration {
		t.Errorf("once quiet, B=%d transactions did not all start at once: running %d, waiting %d, waited %v more",
			before.Concurrent, s.Running, s.Waiting, s.WaitDuration-before.WaitDuration)
	}
	for _, tx := range txs {
		if err := tx.Rollback(); err != nil {
			t.Errorf("rolling back the quiet check's transaction: %v", err)
		}
	}
	txs = nil
	waitFor(t, "the quiet check's permits back", func() bool {
		s := c.Stats()
		return s.Running == 0 && s.Waiting == 0 && s.Pool.InUse == 0
	})
	if w := db.Stats().WaitCount; w != 0 {
		t.Errorf("database/sql WaitCount = %d: callers waited in database/sql's pool, before the gate", w)
	}
}

// contractTable creates a table with a name unique to this test and driver, and drops it at
// cleanup. columns is the parenthesized column list.
func contractTable(t testing.TB, adm *sql.DB, what, drv, columns string) string {
	t.Helper()
	name := fmt.Sprintf("gated_contract_%s_%s_%d_%d", what, drv, time.Now().UnixNano()%1e9, appSeq.Add(1))
	if _, err := adm.Exec("CREATE TABLE " + name + " " + columns); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := adm.ExecContext(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	return name
}

// contractFunction creates a function with a name unique to this test and driver, and drops it
// at cleanup. definition is everything after the name in CREATE FUNCTION. It returns the name.
func contractFunction(t testing.TB, adm *sql.DB, what, drv, definition string) string {
	t.Helper()
	name := fmt.Sprintf("gated_contract_%s_%s_%d_%d", what, drv, time.Now().UnixNano()%1e9, appSeq.Add(1))
	if _, err := adm.Exec("CREATE FUNCTION " + name + definition); err != nil {
		t.Fatalf("create function %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := adm.ExecContext(ctx, "DROP FUNCTION IF EXISTS "+name); err != nil {
			t.Errorf("drop function %s: %v", name, err)
		}
	})
	return name
}

// mustBegin begins a transaction that must be admitted.
func mustBegin(t testing.TB, db *sql.DB) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	return tx
}

// A holder is a transaction that keeps its execution permit until its test lets it go. It ran one
// statement, so its physical connection is open and its backend is known.
type holder struct {
	tx  *sql.Tx
	pid int
}

// hold begins a transaction on db, runs one statement in it and registers a rollback at cleanup
// (a no-op when the test ended it), so that a failing test does not leave it open.
func hold(t testing.TB, db *sql.DB) *holder {
	t.Helper()
	tx := mustBegin(t, db)
	t.Cleanup(func() { tx.Rollback() })
	h := &holder{tx: tx}
	if err := tx.QueryRow("SELECT pg_backend_pid()").Scan(&h.pid); err != nil {
		t.Fatalf("in the holding transaction: %v", err)
	}
	return h
}

func (h *holder) commit(t testing.TB) {
	t.Helper()
	if err := h.tx.Commit(); err != nil {
		t.Fatalf("Commit of the holding transaction: %v", err)
	}
}

// A txResult is what a BeginTx started in the background returned.
type txResult struct {
	tx  *sql.Tx
	err error
}

// beginQueued starts db.BeginTx(ctx) in the background and returns once the call waits in the
// gate's queue (Stats().Waiting grew by one). The caller must receive from the channel.
func beginQueued(t testing.TB, db *sql.DB, c *Connector, ctx context.Context) <-chan txResult {
	t.Helper()
	before := c.Stats().Waiting
	done := make(chan txResult, 1)
	go func() {
		tx, err := db.BeginTx(ctx, nil)
		done <- txResult{tx, err}
	}()
	waitFor(t, "the transaction to queue in the gate", func() bool { return c.Stats().Waiting == before+1 })
	return done
}

// startQueued runs op in the background and returns its result channel once op waits in the gate.
func startQueued(t testing.TB, c *Connector, op func() error) <-chan error {
	t.Helper()
	before := c.Stats().Waiting
	done := make(chan error, 1)
	go func() { done <- op() }()
	waitFor(t, "the operation to queue in the gate", func() bool { return c.Stats().Waiting == before+1 })
	return done
}

// A namedOp is one way of starting an operation through database/sql. Every op passes the gate
// exactly once and leaves nothing open, whether it succeeds or not.
type namedOp struct {
	name string
	run  func(ctx context.Context, db *sql.DB) error
}

// gateOps are the entry points through which database/sql reaches a driver connection.
var gateOps = []namedOp{
	{"Exec", func(ctx context.Context, db *sql.DB) error {
		_, err := db.ExecContext(ctx, "SELECT 1")
		return err
	}},
	{"Query", func(ctx context.Context, db *sql.DB) error {
		rows, err := db.QueryContext(ctx, "SELECT 1")
		if err != nil {
			return err
		}
		return rows.Close()
	}},
	{"QueryRow", func(ctx context.Context, db *sql.DB) error {
		var v int
		return db.QueryRowContext(ctx, "SELECT 1").Scan(&v)
	}},
	{"Begin", func(ctx context.Context, db *sql.DB) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		return tx.Rollback()
	}},
	{"Prepare", func(ctx context.Context, db *sql.DB) error {
		st, err := db.PrepareContext(ctx, "SELECT 1")
		if err != nil {
			return err
		}
		return st.Close()
	}},
	{"Ping", func(ctx context.Context, db *sql.DB) error { return db.PingContext(ctx) }},
	{"Conn+Exec", func(ctx context.Context, db *sql.DB) error {
		// db.Conn takes a virtual connection: no gate, no I/O. The Exec binds it.
		conn, err := db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("db.Conn must not pass the gate: %w", err)
		}
		defer conn.Close()
		_, err = conn.ExecContext(ctx, "SELECT 1")
		return err
	}},
}

// checkGateRefusal fails unless err is the gate's refusal want, one that database/sql will not
// retry (I6).
func checkGateRefusal(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) || !IsRejected(err) {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
	if errors.Is(err, driver.ErrBadConn) {
		t.Errorf("%s: %v wraps driver.ErrBadConn, which database/sql retries", what, err)
	}
}

// isGateWaitCanceled reports whether err is the gate giving up a wait because the caller's context
// ended (counted in Canceled), as opposed to a context error from the driver or database/sql.
func isGateWaitCanceled(err error) bool {
	return errors.Is(err, ErrWaitCanceled) &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// A releaseSample is what watchRelease saw when the permit came back.
type releaseSample struct {
	active int // backends of the app still running the watched statement at that moment
	err    error
}

// watchRelease watches a gate that has a permit taken, from now on, and sends on the returned
// channel how many backends of app were running a statement containing marker at the moment
// Running dropped to 0. I4 wants none: a permit comes back only after the server stopped working
// for the operation that held it. It spins instead of sleeping so that the sample follows the
// release as closely as possible; start it before the caller gives up.
func watchRelease(c *Connector, adm *sql.DB, app, marker string) <-chan releaseSample {
	ch := make(chan releaseSample, 1)
	go func() {
		deadline := time.Now().Add(20 * time.Second)
		for c.Stats().Running > 0 {
			if time.Now().After(deadline) {
				ch <- releaseSample{err: fmt.Errorf("the permit did not come back within 20s: %+v", c.Stats())}
				return
			}
			runtime.Gosched()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var s releaseSample
		s.err = adm.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active' AND strpos(query, $2) > 0`, app, marker).Scan(&s.active)
		ch <- s
	}()
	return ch
}

// checkRelease receives from a watchRelease channel and reports a permit that came back while
// the server still worked.
func checkRelease(t testing.TB, ch <-chan releaseSample, marker string) {
	t.Helper()
	s := <-ch
	if s.err != nil {
		t.Fatalf("watching the release: %v", s.err)
	}
	if s.active != 0 {
		t.Errorf("Running dropped to 0 while %d backends still ran %q: the permit came back before the server stopped", s.active, marker)
	}
}

// opNamed returns the gateOps entry called name.
func opNamed(name string) namedOp {
	for _, op := range gateOps {
		if op.name == name {
			return op
		}
	}
	panic("no gate op " + name)
}

// medianDuration returns the median of ds, which it sorts.
func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}
