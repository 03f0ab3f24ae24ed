package gatedotel

import (
	"context"
	"database/sql"
	"errors"
	"iter"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/fakedb"
	"github.com/gatedsql/gated/internal/obstest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// setup opens a gated DB on a new fake driver with a gatedotel Observer on a manual reader.
func setup(t *testing.T, params string) (*sql.DB, *gated.Connector, *fakedb.Driver, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	obs, err := NewObserver(WithMeterProvider(mp), WithPoolName("shop"))
	if err != nil {
		t.Fatal(err)
	}
	fd := fakedb.New()
	cfg, err := gated.ParseDSN("gate_driver=" + fd.Register() + " " + params)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Observer = obs
	c, err := gated.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := gated.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	reg, err := obs.Register(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Unregister() })
	return db, c, fd, reader
}

// register registers a new gatedotel Observer with c on a manual reader, for the test.
func register(t *testing.T, c *gated.Connector) *sdkmetric.ManualReader {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	obs, err := NewObserver(WithMeterProvider(mp), WithPoolName("shop"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := obs.Register(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Unregister() })
	return reader
}

var waitFor = obstest.WaitFor

// point is one data point: an int64 sum or gauge value, or a histogram count.
type point struct {
	unit  string
	value int64
	attrs attribute.Set
}

// collect returns every data point by instrument name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != scopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{m.Unit, p.Value, p.Attributes})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{m.Unit, int64(p.Count), p.Attributes})
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// value returns the point of name whose attributes include every kv, failing when there is none.
func value(t *testing.T, pts map[string][]point, name, unit string, kvs ...attribute.KeyValue) int64 {
	t.Helper()
next:
	for _, p := range pts[name] {
		for _, kv := range kvs {
			if v, ok := p.attrs.Value(kv.Key); !ok || v != kv.Value {
				continue next
			}
		}
		if p.unit != unit {
			t.Errorf("%s unit %q, want %q", name, p.unit, unit)
		}
		return p.value
	}
	t.Errorf("no %s with %v (have %v)", name, kvs, pts[name])
	return -1
}

func TestSemanticConventionNamesAndValues(t *testing.T) {
	db, c, fd, reader := setup(t, "gate_max_conns=2 gate_concurrent=1 gate_queue=0")
	for range 3 {
		if _, err := db.Exec("SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	held := make(chan error, 1)
	go func() { _, err := db.Exec("BLOCK o"); held <- err }()
	if err := fd.WaitBlocked(context.Background(), "o", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("SELECT 1"); !errors.Is(err, gated.ErrAdmissionFull) {
		t.Fatalf("got %v, want ErrAdmissionFull", err)
	}
	during := collect(t, reader)
	pool := attribute.String("db.client.connection.pool.name", "shop")
	if v := value(t, during, "db.client.connection.count", "{connection}", pool, attribute.String("db.client.connection.state", "used")); v != 1 {
		t.Errorf("used connections during BLOCK = %d", v)
	}
	fd.Release("o")
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "quiet", func() bool { s := c.Stats(); return s.Running == 0 && s.Pool.InUse == 0 })

	s := c.Stats()
	pts := collect(t, reader)
	wl := attribute.String("gated.workload", "default")
	for _, tc := range []struct {
		name, unit string
		attrs      []attribute.KeyValue
		want       int64
	}{
		{"db.client.connection.count", "{connection}", []attribute.KeyValue{pool, attribute.String("db.client.connection.state", "idle")}, int64(s.Pool.Idle)},
		{"db.client.connection.count", "{connection}", []attribute.KeyValue{pool, attribute.String("db.client.connection.state", "used")}, int64(s.Pool.InUse)},
		{"db.client.connection.max", "{connection}", []attribute.KeyValue{pool}, int64(s.Pool.MaxConns)},
		{"db.client.connection.idle.max", "{connection}", []attribute.KeyValue{pool}, int64(s.Pool.MaxConns)},
		{"db.client.connection.pending_requests", "{request}", []attribute.KeyValue{pool}, int64(s.Waiting)},
		{"db.client.connection.timeouts", "{timeout}", []attribute.KeyValue{pool}, s.RejectedTimeout},
		{"db.client.connection.create_time", "s", []attribute.KeyValue{pool}, s.Pool.Opened},
		{"db.client.connection.wait_time", "s", []attribute.KeyValue{pool, wl}, s.Admitted},
		{"db.client.connection.use_time", "s", []attribute.KeyValue{pool, wl}, s.Admitted},
		{"gated.connect.duration", "s", []attribute.KeyValue{pool, wl}, s.Admitted},
		{"gated.statement.duration", "s", []attribute.KeyValue{pool, wl}, s.Admitted},
		{"gated.running", "{operation}", []attribute.KeyValue{pool, wl}, int64(s.Running)},
		{"gated.waiting", "{operation}", []attribute.KeyValue{pool, wl}, int64(s.Waiting)},
		{"gated.concurrent.limit", "{operation}", []attribute.KeyValue{pool, wl}, int64(s.Concurrent)},
		{"gated.queue.limit", "{operation}", []attribute.KeyValue{pool, wl}, int64(s.Queue)},
		{"gated.admitted", "{operation}", []attribute.KeyValue{pool, wl}, s.Admitted},
		{"gated.rejected", "{operation}", []attribute.KeyValue{pool, wl, RejectReasonKey.String("full")}, s.RejectedFull},
		{"gated.rejected", "{operation}", []attribute.KeyValue{pool, wl, RejectReasonKey.String("timeout")}, s.RejectedTimeout},
		{"gated.rejected", "{operation}", []attribute.KeyValue{pool, wl, RejectReasonKey.String("displaced")}, s.RejectedDisplaced},
		{"gated.canceled", "{operation}", []attribute.KeyValue{pool, wl}, s.Canceled},
		{"gated.server_timeouts", "{statement}", []attribute.KeyValue{pool, wl, TimeoutKindKey.String("statement")}, s.StatementTimeouts},
		{"gated.commit_unknown", "{commit}", []attribute.KeyValue{pool, wl}, s.CommitUnknown},
		{"gated.connections.opened", "{connection}", []attribute.KeyValue{pool}, s.Pool.Opened},
		{"gated.connections.closed", "{connection}", []attribute.KeyValue{pool, CloseReasonKey.String("close")}, s.Pool.ClosedByClose},
		{"gated.connect.errors", "{attempt}", []attribute.KeyValue{pool}, s.Pool.ConnectErrors},
		{"gated.connect.canceled", "{attempt}", []attribute.KeyValue{pool}, s.Pool.ConnectCanceled},
	} {
		if got := value(t, pts, tc.name, tc.unit, tc.attrs...); got != tc.want {
			t.Errorf("%s %v = %d, want %d", tc.name, tc.attrs, got, tc.want)
		}
	}
	if s.Admitted != 4 || s.RejectedFull != 1 || s.Pool.Opened != 1 {
		t.Errorf("stats = %+v", s)
	}
}

// TestLendingInstruments: while the default gate runs one operation on its own permit and one
// on a permit the lending batch gate lent it, gated.lent and gated.borrowed equal each gate's
// Lent and Borrowed, and there are no fleet instruments' points outside a fleet.
func TestLendingInstruments(t *testing.T) {
	db, c, fd, reader := setup(t, "gate_max_conns=2 gate_concurrent=1 gate_queue=1 gate_queue_wait=5s gate_workloads=batch:1:1:1s:lend")
	held := make(chan error, 2)
	for range 2 {
		go func() { _, err := db.Exec("BLOCK l"); held <- err }()
	}
	if err := fd.WaitBlocked(context.Background(), "l", 2); err != nil {
		t.Fatal(err)
	}
	pts := collect(t, reader)
	all := maps.Collect(iter.Seq2[string, gated.Stats](c.AllStats()))
	if d, b := all[gated.DefaultWorkload], all["batch"]; d.Borrowed != 1 || b.Lent != 1 {
		t.Fatalf("default borrowed %d, batch lent %d: want 1 and 1", d.Borrowed, b.Lent)
	}
	pool := attribute.String("db.client.connection.pool.name", "shop")
	for name, s := range all {
		wl := WorkloadKey.String(name)
		for _, tc := range []struct {
			name string
			want int
		}{{"gated.lent", s.Lent}, {"gated.borrowed", s.Borrowed}, {"gated.running", s.Running}} {
			if got := value(t, pts, tc.name, "{operation}", pool, wl); got != int64(tc.want) {
				t.Errorf("%s{%s} = %d, Stats says %d", tc.name, name, got, tc.want)
			}
		}
	}
	for name := range pts {
		if strings.HasPrefix(name, "gated.fleet.") {
			t.Errorf("%s has points without a fleet", name)
		}
	}
	fd.Release("l")
	for range 2 {
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	}
}

// TestFleetInstruments: a lone instance of a fleet on PostgreSQL, once seated, reports its place
// in the fleet as Stats().Fleet says, per workload for the totals of B and Q, and the close
// reason shrunk among the others.
func TestFleetInstruments(t *testing.T) {
	dsn := obstest.PGDSN(t, "pgx", obstest.FleetParams(t)+"&gate_max_conns=4&gate_concurrent=2&gate_queue=2&gate_workloads=batch:1:1:1s")
	db, c := obstest.OpenWith(t, dsn, nil)
	reader := register(t, c)
	waitFor(t, "seated", func() bool { return c.Stats().Fleet.Seated })
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "quiet", func() bool { return obstest.Quiet(c) })
	// The fleet's figures change only on a share change or a failed refresh: collect between
	// two equal readings of Stats.
	var pts map[string][]point
	var all map[string]gated.Stats
	waitFor(t, "a stable fleet", func() bool {
		before := c.Stats().Fleet
		pts, all = collect(t, reader), maps.Collect(iter.Seq2[string, gated.Stats](c.AllStats()))
		return c.Stats().Fleet == before && all[gated.DefaultWorkload].Fleet == before
	})
	s := all[gated.DefaultWorkload]
	f := s.Fleet
	if f.Members != 1 || f.Conns != 4 || f.TotalConns != 4 {
		t.Errorf("Stats().Fleet = %+v, want a lone member holding all 4 connections", f)
	}
	pool := attribute.String("db.client.connection.pool.name", "shop")
	for _, tc := range []struct {
		name, unit string
		attrs      []attribute.KeyValue
		want       int64
	}{
		{"gated.fleet.members", "{instance}", []attribute.KeyValue{pool}, int64(f.Members)},
		{"gated.fleet.connections.share", "{connection}", []attribute.KeyValue{pool}, int64(f.Conns)},
		{"gated.fleet.connections.total_limit", "{connection}", []attribute.KeyValue{pool}, int64(f.TotalConns)},
		{"gated.fleet.seated", "{instance}", []attribute.KeyValue{pool}, 1},
		{"gated.fleet.share_changes", "{change}", []attribute.KeyValue{pool}, f.ShareChanges},
		{"gated.fleet.refresh_errors", "{refresh}", []attribute.KeyValue{pool}, f.RefreshErrors},
		{"gated.fleet.schema_missing", "{instance}", []attribute.KeyValue{pool}, 0},
		{"gated.connections.closed", "{connection}", []attribute.KeyValue{pool, CloseReasonKey.String("shrunk")}, s.Pool.ClosedShrunk},
	} {
		if got := value(t, pts, tc.name, tc.unit, tc.attrs...); got != tc.want {
			t.Errorf("%s %v = %d, Stats says %d", tc.name, tc.attrs, got, tc.want)
		}
	}
	for name, s := range all {
		wl := WorkloadKey.String(name)
		for _, tc := range []struct {
			name string
			want int
		}{{"gated.fleet.concurrent.total_limit", s.Fleet.TotalConcurrent}, {"gated.fleet.queue.total_limit", s.Fleet.TotalQueue}, {"gated.concurrent.limit", s.Concurrent}} {
			if got := value(t, pts, tc.name, "{operation}", pool, wl); got != int64(tc.want) {
				t.Errorf("%s{%s} = %d, Stats says %d", tc.name, name, got, tc.want)
			}
		}
	}
}

func TestObserverAllocatesNothingPerEvent(t *testing.T) {
	_, c, _, _ := setup(t, "gate_max_conns=1")
	obs := c.Config().Observer.(*Observer)
	e := gated.Event{Kind: gated.EventHold, Workload: "default", Duration: time.Millisecond}
	obs.Observe(e)
	a := testing.AllocsPerRun(1000, func() { obs.Observe(e) })
	if a != 0 {
		t.Errorf("Observe allocates %v times per event", a)
	}
}
