package gated

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/gatedsql/gated/internal/drivers"
	"github.com/gatedsql/gated/internal/fakedb"
	"github.com/gatedsql/gated/internal/sockconn"
)

// mayRunRecorder is the generic driver's knowledge, recording the mayRun its close was given.
type mayRunRecorder struct {
	drivers.Conn
	closedWith *atomic.Int32 // 0 not closed, 1 mayRun false, 2 mayRun true
}

func (r mayRunRecorder) Close(mayRun bool) {
	r.Conn.Close(mayRun)
	if mayRun {
		r.closedWith.Store(2)
	} else {
		r.closedWith.Store(1)
	}
}

// TestCancellationOfOneCallSurvivesTheNextCallOnTheBinding: two calls on one binding, the first
// cut short by its context (the driver gives the connection up), the second under a context that
// never ends: the destroy is told that the server may still run the first.
func TestCancellationOfOneCallSurvivesTheNextCallOnTheBinding(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=1", fakedb.BreakOnCancel())
	var closedWith atomic.Int32
	c.pool.wrap = func(dc driver.Conn, sock *sockconn.Conn) drivers.Conn {
		return mayRunRecorder{drivers.NewGeneric(dc, sock), &closedWith}
	}
	sc, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		fd.WaitBlocked(context.Background(), "stmt", 1)
		cancel()
	}()
	if _, err := sc.ExecContext(ctx, "BLOCK stmt"); !errors.Is(err, context.Canceled) {
		t.Fatalf("BLOCK under a canceled context: %v", err)
	}
	sc.PingContext(context.Background()) // the next call, on the broken connection
	sc.Close()
	waitFor(t, "the connection destroyed", func() bool { return closedWith.Load() != 0 })
	if closedWith.Load() != 2 {
		t.Fatal("the destroy was not told that the server may still run the canceled statement")
	}
}

// TestContextCanceledAfterSuccessIsNoCancellation: a helper's deferred cancel after its statement
// succeeded latches nothing: the connection is reused.
func TestContextCanceledAfterSuccessIsNoCancellation(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=1", fakedb.BreakOnCancel())
	sc, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if _, err := sc.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}()
	if err := sc.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	sc.Close()
	waitIdle(t, c)
	if _, err := db.Exec("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if s := fd.Stats(); s.Opened != 1 {
		t.Errorf("%d connections opened, want the first reused", s.Opened)
	}
}

// fakeRows are rows of one empty result.
type fakeRows struct{}

func (fakeRows) Columns() []string         { return nil }
func (fakeRows) Close() error              { return nil }
func (fakeRows) Next([]driver.Value) error { return io.EOF }

func TestCallsAllocateNothing(t *testing.T) {
	// Also with gate_concurrent=auto, whose samples are taken at unbind.
	for _, params := range []string{"gate_max_conns=1", "gate_max_conns=1 gate_concurrent=auto"} {
		t.Run(params, func(t *testing.T) { testCallsAllocateNothing(t, params) })
	}
}

func testCallsAllocateNothing(t *testing.T, params string) {
	_, c, _ := openFake(t, params)
	cn := &conn{c: c}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var dr driver.Rows = fakeRows{}
	cases := []struct {
		name string
		op   func()
	}{
		{"exec-like call", func() {
			if err := cn.run(ctx, false, func(pc *physConn) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}},
		{"query until its rows close", func() {
			if err := cn.runAs(ctx, opRows, func(pc *physConn) error { return nil }); err != nil {
				t.Fatal(err)
			}
			cn.rowsOf(dr).Close()
		}},
		{"commit-like call", func() {
			if err := cn.bind(ctx); err != nil {
				t.Fatal(err)
			}
			cl := cn.pc.startCall(context.Background())
			cl.end()
		}},
	}
	for _, tc := range cases {
		if a := testing.AllocsPerRun(1000, func() { tc.op(); cn.unbind() }); a != 0 {
			t.Errorf("%s: bind, call and unbind allocate %v times", tc.name, a)
		}
	}
}

// TestRowsOpenTogetherOnOneBindingKeepTheirOwnResults: the binding's own rows value serves one
// query at a time; rows opened while it is taken are their own.
func TestRowsOpenTogetherOnOneBindingKeepTheirOwnResults(t *testing.T) {
	db, c, _ := openFake(t, "gate_max_conns=1")
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	open := func(v int) *sql.Rows {
		t.Helper()
		rows, err := tx.Query(fmt.Sprintf("SELECT %d", v))
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	read := func(rows *sql.Rows, want int) {
		t.Helper()
		var got int
		if !rows.Next() {
			t.Fatalf("no row: %v", rows.Err())
		}
		if err := rows.Scan(&got); err != nil || got != want {
			t.Fatalf("rows of SELECT %d read %d, %v", want, got, err)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	r1, r2 := open(1), open(2)
	read(r1, 1)
	r3 := open(3) // takes the binding's rows value again, while r2 is open
	read(r2, 2)
	read(r3, 3)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, c)
}
