package gated

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/fakedb"
)

// openFake opens a gated *sql.DB over a new fake driver; params are gate keys in keyword/value
// form. The DB is closed at cleanup, and the fake must then have no connection open.
func openFake(t testing.TB, params string, opts ...fakedb.Option) (*sql.DB, *Connector, *fakedb.Driver) {
	t.Helper()
	fd := fakedb.New(opts...)
	db, err := Open("gate_driver=" + fd.Register() + " " + params)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	c, _ := FromDB(db)
	t.Cleanup(func() {
		db.Close()
		if s := fd.Stats(); s.Open != 0 {
			t.Errorf("after db.Close the fake has %d connections open", s.Open)
		}
		if n := fd.ConcurrentUseViolations(); n != 0 {
			t.Errorf("%d driver calls overlapped on one physical connection", n)
		}
		if n := fd.DoubleCloses(); n != 0 {
			t.Errorf("%d physical connections closed twice", n)
		}
	})
	return db, c, fd
}

func TestConnectDoesNoIOUntilTheFirstOperation(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=2")
	ctx := context.Background()
	sc, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if s := fd.Stats(); s.Opened != 0 {
		t.Fatalf("db.Conn opened %d physical connections; want none before an operation", s.Opened)
	}
	if s := c.Stats(); s.Running != 0 {
		t.Fatalf("db.Conn took a permit: %+v", s)
	}
	var v int
	if err := sc.QueryRowContext(ctx, "SELECT 7").Scan(&v); err != nil || v != 7 {
		t.Fatalf("query: %d, %v", v, err)
	}
	if s := c.Stats(); s.Running != 1 {
		t.Errorf("a pinned *sql.Conn holds its permit until Close: Running = %d", s.Running)
	}
	sc.Close()
	if s := c.Stats(); s.Running != 0 {
		t.Errorf("after conn.Close Running = %d", s.Running)
	}
}

// TestOperationsThroughEveryDriverKind runs each database/sql feature through gated over a
// modern driver (every optional interface), one without a NamedValueChecker, and a legacy
// driver that implements only driver.Conn.
func TestOperationsThroughEveryDriverKind(t *testing.T) {
	kinds := []struct {
		name string
		opts []fakedb.Option
	}{
		{"modern", nil},
		{"no-checker", []fakedb.Option{fakedb.NoChecker()}},
		{"legacy", []fakedb.Option{fakedb.Legacy()}},
		{"column-converter", []fakedb.Option{fakedb.NoChecker(), fakedb.ColumnConverterStmt()}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			db, c, fd := openFake(t, "gate_max_conns=2", k.opts...)
			ctx := context.Background()
			var v int
			if err := db.QueryRowContext(ctx, "SELECT 5").Scan(&v); err != nil || v != 5 {
				t.Fatalf("query: %d, %v", v, err)
			}
			if _, err := db.ExecContext(ctx, "INSERT 1"); err != nil {
				t.Fatalf("exec: %v", err)
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "INSERT 2"); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			tx, err = db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			st, err := db.PrepareContext(ctx, "SELECT 9")
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if err := st.QueryRowContext(ctx).Scan(&v); err != nil || v != 9 {
					t.Fatalf("prepared query: %d, %v", v, err)
				}
			}
			st.Close()
			if err := db.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := db.QueryContext(ctx, "FAIL boom"); !errors.As(err, new(*fakedb.Error)) {
				t.Fatalf("driver error must pass through unchanged: %v", err)
			}
			waitIdle(t, c)
			s := c.Stats()
			// query, exec, 2 tx, prepare, 3 uses, ping, failing query
			if s.Admitted != 10 {
				t.Errorf("Admitted = %d, want 10: every operation passes the gate once", s.Admitted)
			}
			if fs := fd.Stats(); fs.Opened != 1 {
				t.Errorf("sequential operations opened %d physical connections, want 1", fs.Opened)
			}
		})
	}
}

func TestArgumentsConvertedByThePhysicalConnectionRules(t *testing.T) {
	ctx := context.Background()
	t.Run("checker accepts every type", func(t *testing.T) {
		db, _, fd := openFake(t, "")
		if _, err := db.ExecContext(ctx, "ECHO", []string{"a"}, uint64(1<<63+5), 3); err != nil {
			t.Fatal(err)
		}
		want := []any{[]string{"a"}, uint64(1<<63 + 5), 3}
		if got := fd.ArgsSeen(); !reflect.DeepEqual(got, want) {
			t.Errorf("driver saw %#v, want %#v unconverted", got, want)
		}
	})
	t.Run("remove argument", func(t *testing.T) {
		db, _, fd := openFake(t, "")
		if _, err := db.ExecContext(ctx, "ECHO", 1, fakedb.Remove{}, 2); err != nil {
			t.Fatal(err)
		}
		if got := fd.ArgsSeen(); !reflect.DeepEqual(got, []any{1, 2}) {
			t.Errorf("driver saw %#v, want the Remove argument dropped", got)
		}
	})
	t.Run("default converter without checker", func(t *testing.T) {
		db, _, fd := openFake(t, "", fakedb.NoChecker())
		if _, err := db.ExecContext(ctx, "ECHO", 3, sql.NullString{String: "x", Valid: true}); err != nil {
			t.Fatal(err)
		}
		if got := fd.ArgsSeen(); !reflect.DeepEqual(got, []any{int64(3), "x"}) {
			t.Errorf("driver saw %#v, want database/sql's default conversion", got)
		}
		_, err := db.ExecContext(ctx, "ECHO", []string{"a"})
		if err == nil {
			t.Fatal("[]string accepted by a driver without a checker")
		}
	})
	t.Run("legacy refuses named arguments", func(t *testing.T) {
		db, _, _ := openFake(t, "", fakedb.Legacy())
		if _, err := db.ExecContext(ctx, "ECHO", sql.Named("a", 1)); err == nil {
			t.Fatal("named argument accepted by a legacy driver")
		}
	})
}

func TestBadConnOnFirstCallIsRetriedInsideTheBinding(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=1 gate_concurrent=1 gate_queue=0")
	ctx := context.Background()
	if err := db.PingContext(ctx); err != nil { // one idle physical connection
		t.Fatal(err)
	}
	fd.BreakNextOp()
	var v int
	if err := db.QueryRowContext(ctx, "SELECT 3").Scan(&v); err != nil || v != 3 {
		t.Fatalf("query after a broken connection: %d, %v", v, err)
	}
	waitIdle(t, c)
	s := c.Stats()
	if s.Admitted != 2 || s.RejectedFull != 0 || s.RejectedTimeout != 0 {
		t.Errorf("the retry must stay inside one admission (B=1, Q=0): %+v", s)
	}
	if fs := fd.Stats(); fs.Opened != 2 || fs.Open != 1 {
		t.Errorf("fake: opened %d, open %d; want the broken one replaced", fs.Opened, fs.Open)
	}
}

func TestBadConnNeverEscapesForAFreshBinding(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=1 gate_concurrent=1 gate_queue=0")
	for range maxPhysicalTries {
		fd.BreakNextOp()
	}
	_, err := db.ExecContext(context.Background(), "INSERT 1")
	if err == nil || errors.Is(err, driver.ErrBadConn) {
		t.Fatalf("got %v; want an error that database/sql will not retry", err)
	}
	waitIdle(t, c)
	if s := c.Stats(); s.Admitted != 1 {
		t.Errorf("database/sql retried through the gate: %+v", s)
	}
}

func TestRefusalIsNotRetriedByDatabaseSQL(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=1 gate_concurrent=1 gate_queue=0")
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, op := range []func() error{
		func() error { _, err := db.ExecContext(ctx, "INSERT 1"); return err },
		func() error { _, err := db.QueryContext(ctx, "SELECT 1"); return err },
		func() error { _, err := db.BeginTx(ctx, nil); return err },
		func() error { return db.PingContext(ctx) },
	} {
		before := c.Stats().RejectedFull
		if err := op(); !errors.Is(err, ErrAdmissionFull) || errors.Is(err, driver.ErrBadConn) {
			t.Fatalf("got %v, want ErrAdmissionFull and not ErrBadConn", err)
		}
		if got := c.Stats().RejectedFull - before; got != 1 {
			t.Errorf("one call counted %d refusals: database/sql retried it", got)
		}
	}
	if fs := fd.Stats(); fs.Opened != 1 {
		t.Errorf("refusals opened physical connections: %d", fs.Opened)
	}
}

func TestPermitHeldUntilBrokenConnectionIsClosed(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=1 gate_concurrent=1 gate_queue=1 gate_queue_wait=1m", fakedb.BreakOnCancel())
	fd.CloseDelay(200 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(ctx, "BLOCK broken")
		done <- err
	}()
	if err := fd.WaitBlocked(context.Background(), "broken", 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("blocked exec: %v", err)
	}
	// The physical connection is broken and closing (CloseDelay): its permit is still held.
	if s := c.Stats(); s.Running != 1 {
		t.Fatalf("Running = %d right after the caller gave up; the permit must wait for Close", s.Running)
	}
	waitFor(t, "connection closed", func() bool { return fd.Stats().Closed == 1 })
	waitIdle(t, c)
	if fs := fd.Stats(); fs.Open != 0 {
		t.Errorf("broken connection not discarded: %+v", fs)
	}
}

func TestHealthyConnectionIsHandedToTheNextWaiter(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=1 gate_concurrent=1 gate_queue=16 gate_queue_wait=10s")
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 20 {
				var id int64
				if err := db.QueryRow("SELECT CONNID").Scan(&id); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	waitIdle(t, c)
	if fs := fd.Stats(); fs.Opened != 1 || fs.MaxOpen != 1 {
		t.Errorf("opened %d physical connections (at most %d at once) for P=1, want 1", fs.Opened, fs.MaxOpen)
	}
	if s := c.Stats(); s.Admitted != 16*20 {
		t.Errorf("Admitted = %d, want %d", s.Admitted, 16*20)
	}
	if w := db.Stats().WaitCount; w != 0 {
		t.Errorf("database/sql WaitCount = %d, want 0", w)
	}
}

func TestPreparedStatementSharedByGoroutinesPassesTheGateEachTime(t *testing.T) {
	db, c, _ := openFake(t, "gate_max_conns=4 gate_concurrent=4 gate_queue=28 gate_queue_wait=10s")
	st, err := db.Prepare("SELECT CONNID")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	before := c.Stats().Admitted
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 10 {
				var id int64
				if err := st.QueryRow().Scan(&id); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	waitIdle(t, c)
	// A statement use on a virtual connection that has not prepared it yet binds once for the
	// prepare and the use together, so every execution is exactly one admission.
	if got := c.Stats().Admitted - before; got != 320 {
		t.Errorf("Admitted grew by %d for 320 executions", got)
	}
}

func TestConnectFailureReleasesThePermit(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=1 gate_concurrent=1 gate_queue=0")
	boom := errors.New("server refuses connections")
	fd.FailConnects(boom)
	for range 3 {
		if err := db.Ping(); !errors.Is(err, boom) {
			t.Fatalf("got %v, want the connect error", err)
		}
	}
	waitIdle(t, c)
	fd.AllowConnects()
	if err := db.Ping(); err != nil {
		t.Fatalf("after the server accepts again: %v", err)
	}
	if s := c.Stats(); s.Pool.ConnectErrors != 3 || s.RejectedFull != 0 {
		t.Errorf("stats = %+v", s)
	}
}

func TestFailedCommitIsRolledBackOrDiscarded(t *testing.T) {
	boom := errors.New("commit failed")
	t.Run("rolled back and kept", func(t *testing.T) {
		db, c, fd := openFake(t, "gate_max_conns=1 gate_concurrent=1 gate_queue=0")
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		fd.FailNextCommit(boom)
		if err := tx.Commit(); !errors.Is(err, boom) {
			t.Fatalf("Commit: %v", err)
		}
		if s := c.Stats(); s.Running != 0 {
			t.Errorf("Commit returned before its permit was back: Running = %d", s.Running)
		}
		if fs := fd.Stats(); fs.Execs != 1 || fs.Closed != 0 {
			t.Errorf("want one ROLLBACK and the connection kept: %+v", fs)
		}
	})
	t.Run("discarded when the rollback fails", func(t *testing.T) {
		db, c, fd := openFake(t, "gate_max_conns=1")
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		fd.FailNextCommit(boom)
		fd.BreakNextOp() // the ROLLBACK after the failed commit
		if err := tx.Commit(); !errors.Is(err, boom) {
			t.Fatalf("Commit: %v", err)
		}
		waitIdle(t, c)
		if fs := fd.Stats(); fs.Closed != 1 {
			t.Errorf("connection whose rollback failed was kept: %+v", fs)
		}
	})
}

func TestIdleConnectionsExpire(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=2 gate_max_conn_idle_time=20ms")
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "idle connection closed", func() bool { return fd.Stats().Closed == 1 })
	if s := c.Stats(); s.Pool.Open != 0 || s.Pool.Idle != 0 {
		t.Errorf("pool after expiry: %+v", s.Pool)
	}
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
}

func TestReusedConnectionIsReset(t *testing.T) {
	db, _, fd := openFake(t, "gate_max_conns=1")
	for range 3 {
		if err := db.Ping(); err != nil {
			t.Fatal(err)
		}
	}
	if fs := fd.Stats(); fs.Resets != 2 {
		t.Errorf("ResetSession called %d times for 2 reuses", fs.Resets)
	}
}

func TestUnwrapReachesTheInnerConnection(t *testing.T) {
	db, c, _ := openFake(t, "gate_max_conns=1")
	sc, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	err = sc.Raw(func(dc any) error {
		inner, err := Unwrap(context.Background(), dc)
		if err != nil {
			return err
		}
		if _, ok := inner.(driver.Pinger); !ok {
			return fmt.Errorf("Unwrap returned %T", inner)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Running != 1 {
		t.Errorf("the Raw binding lasts until conn.Close: Running = %d", s.Running)
	}
	if _, err := Unwrap(context.Background(), 42); err == nil {
		t.Error("Unwrap accepted a non-gated value")
	}
}

func TestCloseClosesEveryPhysicalConnection(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=3 gate_concurrent=3")
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { db.Ping() })
	}
	wg.Wait()
	db.Close()
	if fs := fd.Stats(); fs.Open != 0 {
		t.Errorf("%d physical connections open after db.Close", fs.Open)
	}
	if _, err := c.Connect(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Connect after Close: %v", err)
	}
}

func TestBindAndUnbindDoNotAllocate(t *testing.T) {
	for _, params := range []string{"gate_max_conns=1", "gate_max_conns=1 gate_concurrent=auto",
		"gate_max_conns=2 gate_concurrent=1 gate_workloads=batch:1:1:1s:lend"} {
		_, c, _ := openFake(t, params)
		cn := &conn{c: c}
		ctx := context.Background()
		allocs := testing.AllocsPerRun(1000, func() {
			if err := cn.bind(ctx); err != nil {
				t.Fatal(err)
			}
			cn.unbind()
		})
		if allocs != 0 {
			t.Errorf("%s: bind+unbind allocates %v times", params, allocs)
		}
	}
}

func TestRowsKeepTheDriversOptionalInterfaces(t *testing.T) {
	db, c, _ := openFake(t, "gate_max_conns=1")
	rows, err := db.Query("SELECT 1; SELECT 2")
	if err != nil {
		t.Fatal(err)
	}
	types, err := rows.ColumnTypes()
	if err != nil || len(types) != 1 || types[0].DatabaseTypeName() == "" {
		t.Fatalf("column types through gated: %v, %v", types, err)
	}
	if s := c.Stats(); s.Running != 1 {
		t.Errorf("open rows must hold the permit: Running = %d", s.Running)
	}
	var got []int
	for {
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		if !rows.NextResultSet() {
			break
		}
	}
	// database/sql closed the rows when the last result set ended, and with them the binding.
	if s := c.Stats(); s.Running != 0 {
		t.Errorf("rows read to the end still hold the permit: Running = %d", s.Running)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []int{1, 2}) {
		t.Errorf("result sets through gated: %v, want [1 2]", got)
	}
	waitIdle(t, c)
}
