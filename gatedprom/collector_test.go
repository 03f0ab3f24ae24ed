package gatedprom

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"
	"maps"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/fakedb"
	"github.com/gatedsql/gated/internal/obstest"
	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

var (
	openFake = obstest.OpenFake
	openWith = obstest.OpenWith
	waitFor  = obstest.WaitFor
)

// gather returns the registry's metrics by name.
func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// metric returns the metric of family name whose labels include want.
func metric(t *testing.T, fams map[string]*dto.MetricFamily, name string, want ...string) *dto.Metric {
	t.Helper()
	mf := fams[name]
	if mf == nil {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i < len(want); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == want[i] && lp.GetValue() == want[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	t.Fatalf("no %s with labels %v", name, want)
	return nil
}

func TestCollectorExportsStatsAndHistograms(t *testing.T) {
	obs := NewObserver()
	db, c, fd := openFake(t, "gate_max_conns=1 gate_concurrent=1 gate_queue=0", obs)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(c, WithDatabase("shop")))
	for range 4 {
		if _, err := db.Exec("SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	held := make(chan error, 1)
	go func() { _, err := db.Exec("BLOCK h"); held <- err }()
	if err := fd.WaitBlocked(context.Background(), "h", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("SELECT 1"); !errors.Is(err, gated.ErrAdmissionFull) {
		t.Fatalf("got %v, want ErrAdmissionFull", err)
	}
	fams := gather(t, reg)
	if v := metric(t, fams, "gated_running", "workload", "default", "database", "shop").GetGauge().GetValue(); v != 1 {
		t.Errorf("gated_running = %v during BLOCK", v)
	}
	fd.Release("h")
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "quiet", func() bool { s := c.Stats(); return s.Running == 0 && s.Pool.InUse == 0 })

	s := c.Stats()
	fams = gather(t, reg)
	for _, tc := range []struct {
		name   string
		labels []string
		want   int64
	}{
		{"gated_admitted_total", nil, s.Admitted},
		{"gated_rejected_total", []string{"reason", "full"}, s.RejectedFull},
		{"gated_rejected_total", []string{"reason", "timeout"}, s.RejectedTimeout},
		{"gated_rejected_total", []string{"reason", "displaced"}, s.RejectedDisplaced},
		{"gated_connections_opened_total", nil, s.Pool.Opened},
	} {
		if got := metric(t, fams, tc.name, tc.labels...).GetCounter().GetValue(); got != float64(tc.want) {
			t.Errorf("%s%v = %v, Stats says %d", tc.name, tc.labels, got, tc.want)
		}
	}
	for _, name := range []string{"gated_wait_seconds", "gated_connect_seconds", "gated_hold_seconds"} {
		h := metric(t, fams, name, "workload", "default").GetHistogram()
		if int64(h.GetSampleCount()) != s.Admitted {
			t.Errorf("%s count = %d, admitted %d", name, h.GetSampleCount(), s.Admitted)
		}
		if b := h.GetBucket(); len(b) != numBuckets || b[0].GetUpperBound() != 0.0001 || b[numBuckets-1].GetUpperBound() != 10 {
			t.Errorf("%s buckets = %v", name, b)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}

// TestCollectorExportsLending: while the default gate runs one operation on its own permit and
// one on a permit the lending batch gate lent it, gated_lent and gated_borrowed equal each
// gate's Lent and Borrowed, and there are no fleet metrics outside a fleet.
func TestCollectorExportsLending(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=2 gate_concurrent=1 gate_queue=1 gate_queue_wait=5s gate_workloads=batch:1:1:1s:lend", nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(c, WithDatabase("shop")))
	held := make(chan error, 2)
	for range 2 {
		go func() { _, err := db.Exec("BLOCK l"); held <- err }()
	}
	if err := fd.WaitBlocked(context.Background(), "l", 2); err != nil {
		t.Fatal(err)
	}
	fams := gather(t, reg)
	all := maps.Collect(iter.Seq2[string, gated.Stats](c.AllStats()))
	if d, b := all[gated.DefaultWorkload], all["batch"]; d.Borrowed != 1 || b.Lent != 1 {
		t.Fatalf("default borrowed %d, batch lent %d: want 1 and 1", d.Borrowed, b.Lent)
	}
	for name, s := range all {
		for _, tc := range []struct {
			metric string
			want   int
		}{{"gated_lent", s.Lent}, {"gated_borrowed", s.Borrowed}, {"gated_running", s.Running}} {
			if v := metric(t, fams, tc.metric, "workload", name, "database", "shop").GetGauge().GetValue(); v != float64(tc.want) {
				t.Errorf("%s{workload=%q} = %v, Stats says %d", tc.metric, name, v, tc.want)
			}
		}
	}
	for name := range fams {
		if strings.HasPrefix(name, "gated_fleet_") {
			t.Errorf("%s exported without a fleet", name)
		}
	}
	fd.Release("l")
	for range 2 {
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}

// TestCollectorExportsFleet: a lone instance of a fleet on PostgreSQL, once seated, exports its
// place in the fleet as Stats().Fleet says, per workload for the totals of B and Q, and the
// close reason shrunk among the others.
func TestCollectorExportsFleet(t *testing.T) {
	dsn := pgDSN(t, "pgx", obstest.FleetParams(t)+"&gate_max_conns=4&gate_concurrent=2&gate_queue=2&gate_workloads=batch:1:1:1s")
	db, c := openWith(t, dsn, nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(c, WithDatabase("shop")))
	waitFor(t, "seated", func() bool { return c.Stats().Fleet.Seated })
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "quiet", func() bool { return obstest.Quiet(c) })
	// The fleet's figures change only on a share change or a failed refresh: gather between two
	// equal readings of Stats.
	var fams map[string]*dto.MetricFamily
	var all map[string]gated.Stats
	waitFor(t, "a stable fleet", func() bool {
		before := c.Stats().Fleet
		fams, all = gather(t, reg), maps.Collect(iter.Seq2[string, gated.Stats](c.AllStats()))
		return c.Stats().Fleet == before && all[gated.DefaultWorkload].Fleet == before
	})
	f := all[gated.DefaultWorkload].Fleet
	if f.Members != 1 || f.Conns != 4 || f.TotalConns != 4 {
		t.Errorf("Stats().Fleet = %+v, want a lone member holding all 4 connections", f)
	}
	db1 := []string{"database", "shop"}
	gauge := func(name string, labels ...string) float64 {
		return metric(t, fams, name, append(labels, db1...)...).GetGauge().GetValue()
	}
	counter := func(name string, labels ...string) float64 {
		return metric(t, fams, name, append(labels, db1...)...).GetCounter().GetValue()
	}
	for _, tc := range []struct {
		name string
		got  float64
		want int64
	}{
		{"gated_fleet_members", gauge("gated_fleet_members"), int64(f.Members)},
		{"gated_fleet_connections_share", gauge("gated_fleet_connections_share"), int64(f.Conns)},
		{"gated_fleet_connections_total_limit", gauge("gated_fleet_connections_total_limit"), int64(f.TotalConns)},
		{"gated_fleet_seated", gauge("gated_fleet_seated"), 1},
		{"gated_fleet_share_changes_total", counter("gated_fleet_share_changes_total"), f.ShareChanges},
		{"gated_fleet_refresh_errors_total", counter("gated_fleet_refresh_errors_total"), f.RefreshErrors},
		{"gated_fleet_schema_missing", gauge("gated_fleet_schema_missing"), 0},
		{"gated_connections_closed_total{reason=shrunk}", counter("gated_connections_closed_total", "reason", "shrunk"), all[gated.DefaultWorkload].Pool.ClosedShrunk},
	} {
		if tc.got != float64(tc.want) {
			t.Errorf("%s = %v, Stats says %d", tc.name, tc.got, tc.want)
		}
	}
	for name, s := range all {
		for _, tc := range []struct {
			metric string
			want   int
		}{{"gated_fleet_concurrent_total_limit", s.Fleet.TotalConcurrent}, {"gated_fleet_queue_total_limit", s.Fleet.TotalQueue}, {"gated_concurrent_limit", s.Concurrent}} {
			if v := gauge(tc.metric, "workload", name); v != float64(tc.want) {
				t.Errorf("%s{workload=%q} = %v, Stats says %d", tc.metric, name, v, tc.want)
			}
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}

// TestCollectorAttachesItsOwnObserver: a Connector made without an Observer (as sql.Open makes
// one) gets the histograms from the collector's own, attached when it was made; they count the
// operations admitted since. WithObserver(nil) leaves them out and attaches nothing.
func TestCollectorAttachesItsOwnObserver(t *testing.T) {
	db, c, _ := openFake(t, "gate_max_conns=1", nil)
	if err := db.Ping(); err != nil { // before the collector: in the counters only
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(c))
	for range 3 {
		if err := db.Ping(); err != nil {
			t.Fatal(err)
		}
	}
	fams := gather(t, reg)
	if v := metric(t, fams, "gated_admitted_total").GetCounter().GetValue(); v != 4 {
		t.Errorf("gated_admitted_total = %v, want 4", v)
	}
	for _, name := range []string{"gated_wait_seconds", "gated_connect_seconds", "gated_hold_seconds", "gated_statement_seconds"} {
		if n := metric(t, fams, name, "workload", "default").GetHistogram().GetSampleCount(); n != 3 {
			t.Errorf("%s count = %d, want the 3 operations since the collector was made", name, n)
		}
	}

	reg2 := prometheus.NewRegistry()
	reg2.MustRegister(NewCollector(c, WithObserver(nil)))
	if fams := gather(t, reg2); fams["gated_wait_seconds"] != nil {
		t.Error("histogram exported with WithObserver(nil)")
	}
}

func TestHistogramBucketsAreUpperBoundsInclusive(t *testing.T) {
	var h histogram
	for _, d := range []time.Duration{0, 100 * time.Microsecond, 101 * time.Microsecond, 10 * time.Second, time.Minute} {
		h.observe(d)
	}
	buckets, count, sum := h.snapshot()
	if count != 5 || buckets[0.0001] != 2 || buckets[0.00025] != 3 || buckets[10] != 4 {
		t.Errorf("count %d, buckets %v", count, buckets)
	}
	if want := (70*time.Second + 201*time.Microsecond).Seconds(); sum != want {
		t.Errorf("sum = %v, want %v", sum, want)
	}
}

func TestObserverAllocatesNothingPerOperation(t *testing.T) {
	allocs := func(obs gated.Observer) float64 {
		db, _, _ := openFake(t, "gate_max_conns=2", obs)
		ctx := context.Background()
		var v int
		db.QueryRowContext(ctx, "SELECT 1").Scan(&v) // the workload's histograms are made once
		return testing.AllocsPerRun(500, func() {
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil {
				t.Fatal(err)
			}
		})
	}
	without, with := allocs(nil), allocs(NewObserver())
	if with != without {
		t.Errorf("QueryRowContext allocates %v times with the Prometheus observer, %v without", with, without)
	}
	// The same with the Observer the collector attaches itself.
	db, c, _ := openFake(t, "gate_max_conns=2", nil)
	NewCollector(c)
	ctx := context.Background()
	var v int
	if attached := testing.AllocsPerRun(500, func() {
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil {
			t.Fatal(err)
		}
	}); attached != without {
		t.Errorf("QueryRowContext allocates %v times with the collector's attached observer, %v without", attached, without)
	}
	obs := NewObserver()
	obs.Observe(gated.Event{Kind: gated.EventAdmitted, Workload: "w"})
	if a := testing.AllocsPerRun(1000, func() {
		obs.Observe(gated.Event{Kind: gated.EventStatement, Workload: "w", Duration: time.Millisecond})
	}); a != 0 {
		t.Errorf("Observe allocates %v times", a)
	}
}

// BenchmarkQueryRowFake measures QueryRowContext("SELECT 1") through gated on the fake driver
// without an observer and with the Prometheus one: the difference is the observer's cost.
func BenchmarkQueryRowFake(b *testing.B) {
	for _, par := range []int{1, 8} {
		for _, kind := range []string{"none", "prom"} {
			b.Run(fmt.Sprintf("observer=%s/par=%d", kind, par), func(b *testing.B) {
				var obs gated.Observer
				if kind == "prom" {
					obs = NewObserver()
				}
				fd := fakedb.New()
				db, _ := openWith(b, "gate_driver="+fd.Register()+" gate_max_conns=4 gate_concurrent=4 gate_queue=1024 gate_queue_wait=1m", obs)
				benchQueryRow(b, db, par)
			})
		}
	}
}

// BenchmarkQueryRowPG is the same against PostgreSQL through pgx, B = P = 10, at 32 goroutines.
func BenchmarkQueryRowPG(b *testing.B) {
	base := pgtest.URL(b)
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	for _, kind := range []string{"none", "prom"} {
		b.Run("observer="+kind+"/goroutines=32", func(b *testing.B) {
			var obs gated.Observer
			if kind == "prom" {
				obs = NewObserver()
			}
			db, _ := openWith(b, base+sep+"gate_max_conns=10&gate_queue=64&gate_queue_wait=1m", obs)
			benchQueryRow(b, db, 32)
		})
	}
}

// benchQueryRow runs QueryRowContext("SELECT 1") on db from goroutines goroutines. Besides time
// per operation it reports the process's CPU time per operation (cpu-ns/op), which other work
// on a shared machine disturbs far less than elapsed time.
func benchQueryRow(b *testing.B, db *sql.DB, goroutines int) {
	ctx := context.Background()
	var v int
	for range 2 * goroutines {
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	defer func() { b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op") }()
	if goroutines == 1 {
		for b.Loop() {
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((goroutines + procs - 1) / procs)
	b.RunParallel(func(pb *testing.PB) {
		var v int
		for pb.Next() {
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// processCPU returns the user and system CPU time the process has used, in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
