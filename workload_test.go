package gated

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/pgtest"
)

// checkQuietWorkload is checkQuiet's permit check for one named workload: once quiet, its B
// transactions begin at once under WithWorkload and all its permits come back (I7 per workload).
func checkQuietWorkload(t testing.TB, db *sql.DB, c *Connector, name string) {
	t.Helper()
	ctx := WithWorkload(context.Background(), name)
	waitFor(t, "workload "+name+" idle", func() bool {
		s, _ := c.WorkloadStats(name)
		return s.Running == 0 && s.Waiting == 0
	})
	before, ok := c.WorkloadStats(name)
	if !ok {
		t.Fatalf("WorkloadStats(%q): no such workload", name)
	}
	var txs []*sql.Tx
	defer func() {
		for _, tx := range txs {
			tx.Rollback()
		}
	}()
	for i := range before.Concurrent {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("workload %s once quiet: permit %d of B=%d not available: %v", name, i+1, before.Concurrent, err)
		}
		txs = append(txs, tx)
		if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatalf("workload %s: %v", name, err)
		}
	}
	if s, _ := c.WorkloadStats(name); s.Running != before.Concurrent || s.WaitDuration != before.WaitDuration {
		t.Errorf("workload %s once quiet: running %d of B=%d, waited %v more", name, s.Running, before.Concurrent, s.WaitDuration-before.WaitDuration)
	}
	for _, tx := range txs {
		tx.Rollback()
	}
	txs = nil
	waitFor(t, "workload "+name+" permits back", func() bool {
		s, _ := c.WorkloadStats(name)
		return s.Running == 0 && s.Waiting == 0
	})
}

// allAttempts sums gateAttempts over every workload of c.
func allAttempts(c *Connector) int64 {
	var n int64
	for _, name := range c.Workloads() {
		s, _ := c.WorkloadStats(name)
		n += s.Admitted + s.RejectedFull + s.RejectedTimeout + s.Canceled
	}
	return n
}

func TestWorkloadsListedWithStats(t *testing.T) {
	cfg, err := ParseDSN("host=db gate_max_conns=6 gate_workloads=batch:2:1,report:1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, want := strings.Join(c.Workloads(), ","), "default,batch,report"; got != want {
		t.Errorf("Workloads() = %s, want %s", got, want)
	}
	for name, want := range map[string][2]int{"": {3, 3}, "default": {3, 3}, "batch": {2, 1}, "report": {1, 0}} {
		s, ok := c.WorkloadStats(name)
		if !ok || s.Concurrent != want[0] || s.Queue != want[1] || s.Pool.MaxConns != 6 {
			t.Errorf("WorkloadStats(%q) = B %d Q %d P %d, %v; want B %d Q %d P 6", name, s.Concurrent, s.Queue, s.Pool.MaxConns, ok, want[0], want[1])
		}
	}
	if _, ok := c.WorkloadStats("nope"); ok {
		t.Error(`WorkloadStats("nope") found a workload`)
	}
	db := OpenDB(c)
	defer db.Close()
	if got := db.Stats().MaxOpenConnections; got != 0 {
		t.Errorf("MaxOpenConnections = %d, want 0", got)
	}
	if err := CheckDB(db); err != nil {
		t.Errorf("CheckDB: %v", err)
	}
	db.SetMaxOpenConns(3 + 3 + 2 + 1 + 1 + 0 - 1) // one below Σ(B+Q)
	if err := CheckDB(db); err == nil {
		t.Error("CheckDB accepted SetMaxOpenConns below the sum of B+Q over the workloads")
	}
}

func TestUnknownWorkloadFailsAtOnceHoldingNothing(t *testing.T) {
	runPG(t, "gate_max_conns=3&gate_workloads=batch:1", func(t *testing.T, e *pgEnv) {
		ctx := WithWorkload(context.Background(), "reprot")
		before, opened := allAttempts(e.c), e.c.Stats().Pool.Opened
		for _, op := range gateOps {
			err := op.Run(ctx, e.db)
			if !errors.Is(err, ErrUnknownWorkload) || !strings.Contains(err.Error(), `"reprot"`) || IsRejected(err) {
				t.Errorf("%s under an unknown workload: %v, want an error wrapping ErrUnknownWorkload naming it", op.Name, err)
			}
		}
		if after := allAttempts(e.c); after != before {
			t.Errorf("unknown workload counted in the gates: %d attempts, was %d", after, before)
		}
		if s := e.c.Stats(); s.Pool.Opened != opened || s.Pool.InUse != 0 {
			t.Errorf("unknown workload touched the pool: opened %d (was %d), in use %d", s.Pool.Opened, opened, s.Pool.InUse)
		}
		checkQuietWorkload(t, e.db, e.c, "batch")
	})
}

func TestWorkloadOfFirstOperationKeptUntilUnbind(t *testing.T) {
	runPG(t, "gate_max_conns=3&gate_concurrent=2&gate_queue=0&gate_queue_wait=0&gate_workloads=batch:1:0", func(t *testing.T, e *pgEnv) {
		batch := WithWorkload(context.Background(), "batch")
		running := func(name string) int {
			s, _ := e.c.WorkloadStats(name)
			return s.Running
		}
		tx, err := e.db.BeginTx(batch, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Statements of the transaction run under the workload that began it, whatever their
		// context names.
		for _, ctx := range []context.Context{context.Background(), WithWorkload(context.Background(), "nope")} {
			if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
				t.Fatalf("statement in a batch transaction: %v", err)
			}
		}
		if b, d := running("batch"), running("default"); b != 1 || d != 0 {
			t.Errorf("batch transaction: running batch %d, default %d; want 1, 0", b, d)
		}
		// batch is full (B=1, Q=0), the default gate is not.
		if _, err := e.db.ExecContext(batch, "SELECT 1"); !errors.Is(err, ErrAdmissionFull) {
			t.Errorf("second batch operation: %v, want ErrAdmissionFull", err)
		}
		if _, err := e.db.ExecContext(context.Background(), "SELECT 1"); err != nil {
			t.Errorf("default operation beside a full batch workload: %v", err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "batch permit back", func() bool { return running("batch") == 0 })

		// A pinned connection keeps the workload of its first statement.
		conn, err := e.db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(batch, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(context.Background(), "SELECT 2"); err != nil {
			t.Fatal(err)
		}
		if b, d := running("batch"), running("default"); b != 1 || d != 0 {
			t.Errorf("pinned batch connection: running batch %d, default %d; want 1, 0", b, d)
		}
		conn.Close()
		checkQuietWorkload(t, e.db, e.c, "batch")
	})
}

// TestWorkloadIsolationUnderOverload overloads a batch workload and checks that it never runs
// more than its B backends and never refuses or delays the default workload, which stays within
// its own B. The latency figures are cmd/gatedbench's (BENCHMARKS.md), not asserted here.
func TestWorkloadIsolationUnderOverload(t *testing.T) {
	if testing.Short() {
		t.Skip("overload test")
	}
	// Also when batch lends its idle permits (it has none idle here), and with the default
	// workload's limit found by gate_concurrent=auto.
	for _, params := range []string{"gate_concurrent=4&gate_workloads=batch:2:2:50ms", "gate_concurrent=4&gate_workloads=batch:2:2:50ms:lend",
		"gate_concurrent=auto&gate_workloads=batch:2:2:50ms:lend"} {
		t.Run(params, func(t *testing.T) { testWorkloadIsolationUnderOverload(t, params) })
	}
}

func testWorkloadIsolationUnderOverload(t *testing.T, params string) {
	runPG(t, "gate_max_conns=6&gate_queue=4&"+params, func(t *testing.T, e *pgEnv) {
		batch := WithWorkload(context.Background(), "batch")
		var stop atomic.Bool
		var maxBatch, maxSleeping atomic.Int64
		var batchOK, batchRefused atomic.Int64
		var wg sync.WaitGroup
		for range 20 { // one every 200 ms each: 10× the 10 operations per second batch can run
			wg.Go(func() {
				tick := time.NewTicker(200 * time.Millisecond)
				defer tick.Stop()
				for ; !stop.Load(); <-tick.C {
					_, err := e.db.ExecContext(batch, "SELECT pg_sleep(0.2)")
					switch {
					case err == nil:
						batchOK.Add(1)
					case IsRejected(err):
						batchRefused.Add(1)
					default:
						t.Errorf("batch: %v", err)
						return
					}
				}
			})
		}
		stopSampling := repeat(func() bool {
			s, _ := e.c.WorkloadStats("batch")
			storeMax(&maxBatch, int64(s.Running))
			if s.Running > s.Concurrent || s.Running+s.Waiting > s.Concurrent+s.Queue {
				t.Errorf("I1 broken for batch: running %d, waiting %d", s.Running, s.Waiting)
			}
			storeMax(&maxSleeping, int64(activeQueries(t, e.adm, e.app, "pg_sleep")))
			return !t.Failed()
		})
		waitFor(t, "batch saturated", func() bool { return batchRefused.Load() > 0 })
		// The default workload runs within its B while batch is overloaded: nothing refused.
		var defWG sync.WaitGroup
		for range 4 {
			defWG.Go(func() {
				for i := 0; i < 50 || batchOK.Load() < 6; i++ {
					var one int
					if err := e.db.QueryRowContext(context.Background(), "SELECT 1").Scan(&one); err != nil {
						t.Errorf("default workload beside an overloaded batch: %v", err)
						return
					}
				}
			})
		}
		defWG.Wait()
		stop.Store(true)
		wg.Wait()
		stopSampling()
		if m := maxBatch.Load(); m > 2 {
			t.Errorf("batch ran %d operations at once, B = 2", m)
		}
		if m := maxSleeping.Load(); m > 2 {
			t.Errorf("%d backends ran batch's pg_sleep at once, B = 2", m)
		}
		if s := e.c.Stats(); s.RejectedFull+s.RejectedTimeout != 0 {
			t.Errorf("default workload refused %d times beside an overloaded batch", s.RejectedFull+s.RejectedTimeout)
		}
		t.Logf("batch: %d done, %d refused; max running %d", batchOK.Load(), batchRefused.Load(), maxBatch.Load())
		checkQuietWorkload(t, e.db, e.c, "batch")
	})
}

var gateNameSeq atomic.Int64

// gateNameDSN returns a gated DSN for the test server with gate_name set to a unique name and
// no application_name, and that name.
func gateNameDSN(t *testing.T, drv, params string) (dsn, name string) {
	t.Helper()
	name = fmt.Sprintf("gated_test_gn_%d_%d", gateNameSeq.Add(1), appSeq.Add(1))
	dsn, _ = pgDSN(t, pgtest.URL(t), drv, params+"&gate_name="+name)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("application_name") // gated sets it to gate_name
	u.RawQuery = q.Encode()
	return u.String(), name
}

func TestGateNameSharesOneGateAndPool(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		adm := admin(t)
		dsn, name := gateNameDSN(t, drv, "gate_max_conns=2&gate_concurrent=1&gate_queue=0")
		db1, err := sql.Open(DriverName, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db1.Close()
		db2, err := Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db2.Close()
		c1, _ := FromDB(db1)
		c2, _ := FromDB(db2)

		tx := mustBegin(t, db1)
		if _, err := tx.Exec("SELECT 1"); err != nil {
			t.Fatal(err)
		}
		// B = 1 for both handles together.
		if _, err := db2.Exec("SELECT 1"); !errors.Is(err, ErrAdmissionFull) {
			t.Errorf("second handle while the first holds the one permit: %v, want ErrAdmissionFull", err)
		}
		if s1, s2 := c1.Stats(), c2.Stats(); s1.Running != 1 || s2.Running != 1 || s1.Pool.Open != s2.Pool.Open {
			t.Errorf("stats of the shared gate: running %d and %d, pool open %d and %d", s1.Running, s2.Running, s1.Pool.Open, s2.Pool.Open)
		}
		// gate_name is the application_name when the DSN names none.
		if n := backends(t, adm, name); n != 1 {
			t.Errorf("%d backends with application_name %q, want 1", n, name)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}

		// A different configuration under the same name is refused, naming the key.
		other := strings.Replace(dsn, "gate_queue=0", "gate_queue=3", 1)
		if _, err := Open(other); err == nil {
			t.Error("Open with the same gate_name and another gate_queue succeeded")
		} else {
			checkDSNError(t, err, keyQueue)
		}

		// Closing one handle leaves the shared gate and pool to the other.
		db1.Close()
		if _, err := db1.Exec("SELECT 1"); err == nil {
			t.Error("closed handle still runs statements")
		}
		if _, err := db2.Exec("SELECT 1"); err != nil {
			t.Fatalf("the other handle after one closed: %v", err)
		}
		checkQuiet(t, db2, c2, 0)
		db2.Close()
		if s := c2.Stats(); s.Pool.Open != 0 {
			t.Errorf("%d physical connections open after the last handle closed", s.Pool.Open)
		}
		// The name is free again, for any configuration.
		db3, err := Open(other)
		if err != nil {
			t.Fatalf("Open after the last handle of the name closed: %v", err)
		}
		db3.Close()
	})
}

// Every setting of a Config but its Name, Observer, Logger and pgx hooks must match for two Connectors to
// share a gate_name: a field added to Config and forgotten in sameGate would let two different
// configurations share gates silently.
func TestGateNameComparesEveryConfigField(t *testing.T) {
	base := dsnDefaults()
	base.Name = "n"
	typ := reflect.TypeOf(*base)
	for i := range typ.NumField() {
		f := typ.Field(i)
		switch f.Name {
		case "Name", "Observer", "Logger", "PgxBeforeConnect", "PgxAfterConnect":
			continue
		}
		other := *base
		v := reflect.ValueOf(&other).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 1)
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Slice:
			v.Set(reflect.ValueOf([]Workload{{Name: "w", Concurrent: 1}}))
		default:
			t.Fatalf("Config.%s: kind %v not covered by this test", f.Name, v.Kind())
		}
		if err := sameGate(base, &other); err == nil {
			t.Errorf("Config.%s differs, and sameGate accepts the two configurations", f.Name)
		}
	}
}
