package fakedb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the run when a goroutine of the fake or of database/sql outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openDB registers d and opens a *sql.DB on it, closed at the end of the test.
func openDB(t *testing.T, d *Driver) *sql.DB {
	t.Helper()
	db, err := sql.Open(d.Register(), "fake-dsn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// modes runs f with a modern and a Legacy driver.
func modes(t *testing.T, f func(t *testing.T, d *Driver), opts ...Option) {
	t.Run("modern", func(t *testing.T) { f(t, New(opts...)) })
	t.Run("legacy", func(t *testing.T) { f(t, New(append(opts, Legacy())...)) })
}

func waitBlocked(t *testing.T, d *Driver, name string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.WaitBlocked(ctx, name, n); err != nil {
		t.Fatal(err)
	}
}

func TestInterfaces(t *testing.T) {
	modern, err := New().Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer modern.Close()
	for _, ok := range []bool{
		implements[driver.ConnPrepareContext](modern), implements[driver.ConnBeginTx](modern),
		implements[driver.ExecerContext](modern), implements[driver.QueryerContext](modern),
		implements[driver.Pinger](modern), implements[driver.SessionResetter](modern),
		implements[driver.Validator](modern), implements[driver.NamedValueChecker](modern),
	} {
		if !ok {
			t.Errorf("modern conn %T lacks an interface", modern)
		}
	}
	s, _ := modern.Prepare("SELECT 1")
	if !implements[driver.StmtExecContext](s) || !implements[driver.StmtQueryContext](s) || implements[driver.ColumnConverter](s) {
		t.Errorf("modern stmt %T has the wrong interfaces", s)
	}
	s.Close()
	r, _ := modern.(driver.QueryerContext).QueryContext(context.Background(), "SELECT 1", nil)
	if !implements[driver.RowsColumnTypeDatabaseTypeName](r) || !implements[driver.RowsNextResultSet](r) {
		t.Errorf("modern rows %T lack interfaces", r)
	}
	r.Close()
	if !implements[driver.DriverContext](New().SQLDriver()) {
		t.Error("modern driver is not a DriverContext")
	}

	noCheck, _ := New(NoChecker()).Open("")
	if implements[driver.NamedValueChecker](noCheck) || !implements[driver.ExecerContext](noCheck) {
		t.Errorf("NoChecker conn %T has the wrong interfaces", noCheck)
	}
	noCheck.Close()
	conv, _ := New(ColumnConverterStmt()).Open("")
	s, _ = conv.Prepare("SELECT 1")
	if !implements[driver.ColumnConverter](s) || !implements[driver.StmtExecContext](s) {
		t.Errorf("ColumnConverterStmt stmt %T has the wrong interfaces", s)
	}
	s.Close()
	conv.Close()

	d := New(Legacy())
	if implements[driver.DriverContext](d.SQLDriver()) {
		t.Error("legacy SQLDriver is a DriverContext")
	}
	legacy, _ := d.Open("")
	defer legacy.Close()
	if implements[driver.ConnPrepareContext](legacy) || implements[driver.ExecerContext](legacy) ||
		implements[driver.QueryerContext](legacy) || implements[driver.Validator](legacy) ||
		implements[driver.SessionResetter](legacy) || implements[driver.NamedValueChecker](legacy) ||
		implements[driver.Pinger](legacy) || implements[driver.ConnBeginTx](legacy) {
		t.Errorf("legacy conn %T has modern interfaces", legacy)
	}
	s, _ = legacy.Prepare("SELECT 1")
	if implements[driver.StmtExecContext](s) || implements[driver.StmtQueryContext](s) || implements[driver.ColumnConverter](s) {
		t.Errorf("legacy stmt %T has modern interfaces", s)
	}
	r, _ = s.Query(nil)
	if implements[driver.RowsNextResultSet](r) || implements[driver.RowsColumnTypeDatabaseTypeName](r) {
		t.Errorf("legacy rows %T have modern interfaces", r)
	}
	r.Close()
	s.Close()
}

func implements[I any](v any) bool { _, ok := v.(I); return ok }

func TestSelectAndConnID(t *testing.T) {
	modes(t, func(t *testing.T, d *Driver) {
		db := openDB(t, d)
		var v int64
		if err := db.QueryRow("SELECT 42").Scan(&v); err != nil || v != 42 {
			t.Fatalf("SELECT 42 = %d, %v", v, err)
		}
		rows, err := db.Query("SELECT 7")
		if err != nil {
			t.Fatal(err)
		}
		cts, _ := rows.ColumnTypes()
		want := "INT8"
		if d.opts.legacy {
			want = ""
		}
		if len(cts) != 1 || cts[0].Name() != "v" || cts[0].DatabaseTypeName() != want {
			t.Errorf("column types: %v", cts)
		}
		rows.Close()

		c, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var id int64
		if err := c.QueryRowContext(context.Background(), "SELECT CONNID").Scan(&id); err != nil {
			t.Fatal(err)
		}
		if ids := d.OpenConns(); len(ids) != 1 || ids[0] != id {
			t.Errorf("CONNID %d, open conns %v", id, ids)
		}
		if err := db.QueryRow("SELECT x").Scan(&v); !errors.As(err, new(*Error)) {
			t.Errorf("SELECT x: %v", err)
		}
		if d.LastDSN() != "fake-dsn" {
			t.Errorf("LastDSN = %q", d.LastDSN())
		}
	})
}

type valuer struct{}

func (valuer) Value() (driver.Value, error) { return "from Value", nil }

func TestEcho(t *testing.T) {
	echo := func(t *testing.T, db *sql.DB, query string, args ...any) ([]any, error) {
		t.Helper()
		rows, err := db.Query(query, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if !rows.Next() {
			t.Fatalf("no row: %v", rows.Err())
		}
		return vals, rows.Scan(ptrs...)
	}
	big := uint64(1) << 63

	t.Run("modern", func(t *testing.T) {
		d := New()
		db := openDB(t, d)
		got, err := echo(t, db, "ECHO", 1, "s", []string{"a", "b"}, big, Remove{}, valuer{}, sql.Named("n", 2.5))
		if err != nil {
			t.Fatal(err)
		}
		want := []any{1, "s", []string{"a", "b"}, big, "from Value", 2.5}
		if !reflect.DeepEqual(d.ArgsSeen(), want) || !reflect.DeepEqual(got, want) {
			t.Errorf("ArgsSeen %#v, row %#v, want %#v", d.ArgsSeen(), got, want)
		}
		if _, err := db.Exec("INSERT ?", int8(3)); err != nil {
			t.Fatal(err)
		}
		if want := []any{int8(3)}; !reflect.DeepEqual(d.ArgsSeen(), want) {
			t.Errorf("Exec ArgsSeen %#v", d.ArgsSeen())
		}
	})
	for name, opts := range map[string][]Option{"nochecker": {NoChecker()}, "legacy": {Legacy()}} {
		t.Run(name, func(t *testing.T) {
			d := New(opts...)
			db := openDB(t, d)
			if _, err := echo(t, db, "ECHO ?, ?", 1, valuer{}); err != nil {
				t.Fatal(err)
			}
			if want := []any{int64(1), "from Value"}; !reflect.DeepEqual(d.ArgsSeen(), want) {
				t.Errorf("ArgsSeen %#v, want %#v", d.ArgsSeen(), want)
			}
			if _, err := echo(t, db, "ECHO ?", []string{"a"}); err == nil {
				t.Error("[]string accepted by the default converter")
			}
		})
	}
	t.Run("columnconverter", func(t *testing.T) {
		d := New(Legacy(), ColumnConverterStmt())
		db := openDB(t, d)
		if _, err := echo(t, db, "ECHO ?, ?", []string{"a", "b"}, 7); err != nil {
			t.Fatal(err)
		}
		if want := []any{"a,b", int64(7)}; !reflect.DeepEqual(d.ArgsSeen(), want) {
			t.Errorf("ArgsSeen %#v, want %#v", d.ArgsSeen(), want)
		}
	})
}

func TestMultipleResultSets(t *testing.T) {
	db := openDB(t, New())
	rows, err := db.Query("SELECT 1; SELECT 2")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []int64
	for {
		for rows.Next() {
			var v int64
			rows.Scan(&v)
			got = append(got, v)
		}
		if !rows.NextResultSet() {
			break
		}
	}
	if !reflect.DeepEqual(got, []int64{1, 2}) || rows.Err() != nil {
		t.Errorf("got %v, %v", got, rows.Err())
	}
}

func TestBlockRelease(t *testing.T) {
	modes(t, func(t *testing.T, d *Driver) {
		db := openDB(t, d)
		done := make(chan error)
		go func() {
			_, err := db.Exec("BLOCK r")
			done <- err
		}()
		waitBlocked(t, d, "r", 1)
		if n := d.Blocked("r"); n != 1 {
			t.Errorf("Blocked = %d", n)
		}
		d.Release("r")
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("BLOCK r"); err != nil { // released gates stay open
			t.Fatal(err)
		}
	})
}

func TestBlockCancel(t *testing.T) {
	for _, breakOnCancel := range []bool{false, true} {
		var opts []Option
		if breakOnCancel {
			opts = append(opts, BreakOnCancel())
		}
		d := New(opts...)
		db := openDB(t, d)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			_, err := db.ExecContext(ctx, "BLOCK c")
			done <- err
		}()
		waitBlocked(t, d, "c", 1)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		st := d.Stats()
		if breakOnCancel != (st.Closed == 1) || st.InUse != 0 {
			t.Errorf("breakOnCancel=%v: stats %+v", breakOnCancel, st)
		}
		if _, err := db.Exec("INSERT"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFail(t *testing.T) {
	modes(t, func(t *testing.T, d *Driver) {
		db := openDB(t, d)
		var e *Error
		if _, err := db.Exec("FAIL boom"); !errors.As(err, &e) || e.Msg != "boom" {
			t.Fatalf("err = %v", err)
		}
		if _, err := db.Query("FAIL again"); !errors.As(err, &e) {
			t.Fatalf("err = %v", err)
		}
		if _, err := db.Exec("INSERT"); err != nil {
			t.Fatal(err)
		}
		if st := d.Stats(); st.Opened != 1 {
			t.Errorf("FAIL broke the conn: %+v", st)
		}
	})
}

func TestBadConnRetry(t *testing.T) {
	modes(t, func(t *testing.T, d *Driver) {
		db := openDB(t, d)
		if _, err := db.Exec("BADCONN"); !errors.Is(err, driver.ErrBadConn) {
			t.Fatalf("err = %v", err)
		}
		if st := d.Stats(); st.Execs != 3 || st.Opened != 3 || st.Closed != 3 {
			t.Errorf("database/sql did not retry as expected: %+v", st)
		}
		d.BreakNextOp()
		if _, err := db.Exec("INSERT"); err != nil {
			t.Fatal(err)
		}
		if st := d.Stats(); st.Opened != 5 || st.Closed != 4 {
			t.Errorf("BreakNextOp: %+v", st)
		}
	})
}

func TestTx(t *testing.T) {
	ctx := context.Background()
	modes(t, func(t *testing.T, d *Driver) {
		db := openDB(t, d)
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		tx.Exec("INSERT")
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		tx, _ = db.Begin()
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		errX := errors.New("x")
		d.FailNextCommit(errX)
		tx, _ = db.Begin()
		if err := tx.Commit(); !errors.Is(err, errX) {
			t.Fatalf("commit err = %v", err)
		}
		d.FailNextRollback(errX)
		tx, _ = db.Begin()
		if err := tx.Rollback(); !errors.Is(err, errX) {
			t.Fatalf("rollback err = %v", err)
		}
		if st := d.Stats(); st.Begins != 4 || st.Commits != 2 || st.Rollbacks != 2 || st.Opened != 1 {
			t.Errorf("stats %+v", st)
		}
		tx, err = db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true})
		if err == nil {
			defer tx.Rollback()
		}
		if d.opts.legacy {
			if err == nil {
				t.Error("legacy driver accepted an isolation level")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if o := d.LastTxOptions(); o.Isolation != driver.IsolationLevel(sql.LevelSerializable) || !o.ReadOnly {
			t.Errorf("LastTxOptions %+v", o)
		}
	})

	// A second BeginTx on one conn fails, and IsValid/ResetSession reject a conn in a transaction.
	c, _ := New().Open("")
	defer c.Close()
	if _, err := c.(driver.ConnBeginTx).BeginTx(ctx, driver.TxOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.(driver.ConnBeginTx).BeginTx(ctx, driver.TxOptions{}); !errors.As(err, new(*Error)) {
		t.Errorf("nested BeginTx: %v", err)
	}
	if c.(driver.Validator).IsValid() || c.(driver.SessionResetter).ResetSession(ctx) != driver.ErrBadConn {
		t.Error("conn in a transaction is valid")
	}
}

func TestConnectFaults(t *testing.T) {
	d := New()
	db := openDB(t, d)
	errA, errB := errors.New("a"), errors.New("b")
	d.FailNextConnect(errA)
	if err := db.Ping(); !errors.Is(err, errA) {
		t.Fatalf("err = %v", err)
	}
	d.FailConnects(errB)
	for range 2 {
		if err := db.Ping(); !errors.Is(err, errB) {
			t.Fatalf("err = %v", err)
		}
	}
	d.AllowConnects()
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Opened != 1 || st.Pings != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestBreakAll(t *testing.T) {
	ctx := context.Background()
	modes(t, func(t *testing.T, d *Driver) {
		db := openDB(t, d)
		if _, err := db.Exec("INSERT"); err != nil { // one idle conn
			t.Fatal(err)
		}
		pinned, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d.BreakAll()
		if _, err := pinned.ExecContext(ctx, "INSERT"); !errors.Is(err, driver.ErrBadConn) {
			t.Fatalf("pinned conn after BreakAll: %v", err)
		}
		pinned.Close()
		if _, err := db.Exec("INSERT"); err != nil {
			t.Fatal(err)
		}
		if st := d.Stats(); st.Opened != 2 || st.Open != 1 {
			t.Errorf("stats %+v", st)
		}
	})
}

func TestCloseDelay(t *testing.T) {
	d := New()
	db := openDB(t, d)
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	const delay = 30 * time.Millisecond
	d.CloseDelay(delay)
	start := time.Now()
	db.Close()
	if el := time.Since(start); el < delay {
		t.Errorf("Close took %v", el)
	}
	if st := d.Stats(); st.Closed != 1 || st.Open != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestStats(t *testing.T) {
	d := New()
	db := openDB(t, d)
	db.SetMaxIdleConns(10)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := db.Exec("BLOCK s"); err != nil {
				t.Error(err)
			}
		})
	}
	waitBlocked(t, d, "s", 3)
	if st := d.Stats(); st.Open != 3 || st.InUse != 3 {
		t.Errorf("while blocked: %+v", st)
	}
	d.Release("s")
	wg.Wait()

	stmt, err := db.Prepare("SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := stmt.Query()
	if st := d.Stats(); st.StmtsOpen != 1 || st.RowsOpen != 1 {
		t.Errorf("with rows open: %+v", st)
	}
	rows.Close()
	stmt.Close()
	st := d.Stats()
	want := Stats{Opened: 3, Open: 3, MaxOpen: 3, InUseMax: 3, Prepares: 1, Execs: 3, Queries: 1,
		Resets: st.Resets, Validations: st.Validations}
	if st != want || st.Resets == 0 || st.Validations == 0 {
		t.Errorf("stats %+v\nwant  %+v", st, want)
	}
	if d.ConcurrentUseViolations() != 0 {
		t.Error("database/sql used a conn concurrently")
	}
}

func TestConcurrentUseDetection(t *testing.T) {
	d := New()
	c, _ := d.Open("")
	ex := c.(driver.ExecerContext)
	done := make(chan error)
	go func() {
		_, err := ex.ExecContext(context.Background(), "BLOCK v", nil)
		done <- err
	}()
	waitBlocked(t, d, "v", 1)
	if _, err := ex.ExecContext(context.Background(), "INSERT", nil); err != nil {
		t.Fatal(err)
	}
	d.Release("v")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := ex.ExecContext(context.Background(), "INSERT", nil); err != nil {
		t.Fatal(err)
	}
	if n := d.ConcurrentUseViolations(); n != 1 {
		t.Errorf("violations = %d", n)
	}
	if st := d.Stats(); st.InUseMax != 1 || st.InUse != 0 {
		t.Errorf("stats %+v", st)
	}
	c.Close()
}

func TestCloseAndDoubleClose(t *testing.T) {
	d := New()
	c, _ := d.Open("")
	s, _ := c.Prepare("INSERT")
	c.Close()
	c.Close()
	if d.DoubleCloses() != 1 {
		t.Errorf("DoubleCloses = %d", d.DoubleCloses())
	}
	if _, err := c.Prepare("SELECT 1"); err != driver.ErrBadConn {
		t.Errorf("Prepare after Close: %v", err)
	}
	if _, err := s.(driver.StmtExecContext).ExecContext(context.Background(), nil); err != driver.ErrBadConn {
		t.Errorf("stmt Exec after Close: %v", err)
	}
	s.Close()
	if c.(driver.Validator).IsValid() || len(d.OpenConns()) != 0 {
		t.Error("closed conn still valid or open")
	}
}

func TestRegisterUnique(t *testing.T) {
	a, b := New().Register(), New().Register()
	if a == b {
		t.Errorf("names %q and %q", a, b)
	}
}
