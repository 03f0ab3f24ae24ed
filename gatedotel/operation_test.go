package gatedotel

import (
	"context"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/obstest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// histograms returns the histogram data of every instrument by name.
func histograms(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if _, ok := m.Data.(metricdata.Histogram[float64]); ok {
				out[m.Name] = m
			}
		}
	}
	return out
}

// everyAttribute yields every attribute of every data point of every instrument r collects.
func everyAttribute(t *testing.T, r *sdkmetric.ManualReader) []attribute.KeyValue {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var kvs []attribute.KeyValue
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					kvs = append(kvs, p.Attributes.ToSlice()...)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					kvs = append(kvs, p.Attributes.ToSlice()...)
				}
			}
		}
	}
	return kvs
}

// checkNoCredentials fails when an attribute's value holds the password or is the user name.
func checkNoCredentials(t *testing.T, kvs []attribute.KeyValue, user, password string) {
	t.Helper()
	for _, kv := range kvs {
		if v := kv.Value.Emit(); strings.Contains(v, password) || v == user {
			t.Errorf("attribute %s = %q holds a credential", kv.Key, v)
		}
	}
}

// TestOperationDurationFollowsTheStabilityOptIn: OTEL_SEMCONV_STABILITY_OPT_IN read as otelsql
// reads it: unset (or neither value) records the earlier gated.statement.duration only,
// "database" the stable db.client.operation.duration only, "database/dup" both; each counts
// every call into the inner driver, the stable one in seconds with the conventions' buckets.
func TestOperationDurationFollowsTheStabilityOptIn(t *testing.T) {
	for _, tc := range []struct {
		name, env       string
		unset           bool
		earlier, stable bool
	}{
		{name: "unset", unset: true, earlier: true},
		{name: "empty", env: "", earlier: true},
		{name: "other", env: "http", earlier: true},
		{name: "database", env: "database", stable: true},
		{name: "listed", env: "http, database", stable: true},
		{name: "dup", env: "database/dup", earlier: true, stable: true},
		{name: "dup and stable", env: "database,database/dup", earlier: true, stable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(StabilityOptInEnv, tc.env)
			if tc.unset {
				os.Unsetenv(StabilityOptInEnv) // t.Setenv restores it
			}
			db, c, _, reader := setup(t, "gate_max_conns=1")
			for range 3 {
				if _, err := db.Exec("SELECT 1"); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := db.Exec("FAIL boom"); err == nil {
				t.Fatal("FAIL succeeded")
			}
			s := c.Stats()
			hs := histograms(t, reader)
			for _, h := range []struct {
				name string
				want bool
			}{{"gated.statement.duration", tc.earlier}, {"db.client.operation.duration", tc.stable}} {
				m, ok := hs[h.name]
				if ok != h.want {
					t.Fatalf("%s recorded: %v, want %v (%s=%q)", h.name, ok, h.want, StabilityOptInEnv, tc.env)
				}
				if !ok {
					continue
				}
				var n uint64
				for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					n += p.Count
					if h.name == "db.client.operation.duration" && !slices.Equal(p.Bounds, operationBuckets) {
						t.Errorf("%s bounds %v, want %v", h.name, p.Bounds, operationBuckets)
					}
				}
				if m.Unit != "s" {
					t.Errorf("%s unit %q", h.name, m.Unit)
				}
				if int64(n) != s.Admitted {
					t.Errorf("%s counts %d calls, want %d (one per operation)", h.name, n, s.Admitted)
				}
			}
		})
	}
}

// TestOperationDurationAttributes: on a driver gated does not know, db.client.operation.duration
// has db.system.name other_sql, the DSN's host and port as server.address and server.port, the
// pool's name and the workload; a failed call adds error.type, the error's Go type; and no
// attribute of any instrument holds the DSN's user or password.
func TestOperationDurationAttributes(t *testing.T) {
	t.Setenv(StabilityOptInEnv, "database/dup")
	db, _, _, reader := setup(t, "gate_max_conns=1 host=db.example port=6543 user=alice password='s3cret host=evil'")
	if _, err := db.Exec("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("FAIL boom"); err == nil {
		t.Fatal("FAIL succeeded")
	}
	pts := collect(t, reader)
	common := []attribute.KeyValue{
		attribute.String("db.system.name", "other_sql"), attribute.String("server.address", "db.example"),
		attribute.Int("server.port", 6543), attribute.String("db.client.connection.pool.name", "shop"),
		WorkloadKey.String("default"),
	}
	var ok, failed int64
	for _, p := range pts["db.client.operation.duration"] {
		for _, kv := range common {
			if v, found := p.attrs.Value(kv.Key); !found || v != kv.Value {
				t.Errorf("point %v: %s = %v, want %v", p.attrs, kv.Key, v.Emit(), kv.Value.Emit())
			}
		}
		switch v, found := p.attrs.Value("error.type"); {
		case !found:
			ok += p.value
		case v.AsString() == "*fakedb.Error":
			failed += p.value
		default:
			t.Errorf("error.type %q, want the error's Go type *fakedb.Error", v.AsString())
		}
		if p.attrs.HasValue("db.operation.name") {
			t.Errorf("db.operation.name set: %v", p.attrs)
		}
	}
	if ok != 1 || failed != 1 {
		t.Errorf("db.client.operation.duration: %d successful and %d failed calls, want 1 and 1", ok, failed)
	}
	checkNoCredentials(t, everyAttribute(t, reader), "alice", "s3cret")
}

// TestOperationDurationOnPostgreSQL: over pgx and lib/pq, db.system.name is postgresql,
// server.address and server.port are the DSN's, a statement that fails on the server has its
// SQLSTATE as error.type and db.response.status_code, and the DSN's user and password appear in
// no attribute.
func TestOperationDurationOnPostgreSQL(t *testing.T) {
	t.Setenv(StabilityOptInEnv, "database")
	for _, drv := range []string{"pgx", "postgres"} {
		t.Run(drv, func(t *testing.T) {
			u, err := url.Parse(obstest.PGDSN(t, drv, "gate_max_conns=1"))
			if err != nil {
				t.Fatal(err)
			}
			const password = "not-checked-by-trust-s3cret"
			user := u.User.Username()
			u.User = url.UserPassword(user, password)
			db, c := obstest.OpenDSN(t, u.String())
			reader := register(t, c)
			if _, err := db.Exec("SELECT 1"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec("SELECT 1/0"); err == nil {
				t.Fatal("SELECT 1/0 succeeded")
			}
			pts := collect(t, reader)
			if _, ok := pts["gated.statement.duration"]; ok {
				t.Error("gated.statement.duration recorded with OTEL_SEMCONV_STABILITY_OPT_IN=database")
			}
			host, port := u.Hostname(), u.Port()
			if port == "" {
				port = "5432"
			}
			server := []attribute.KeyValue{
				attribute.String("db.system.name", "postgresql"), attribute.String("server.address", host),
			}
			wantPort, err := strconv.Atoi(port)
			if err != nil {
				t.Fatal(err)
			}
			server = append(server, attribute.Int("server.port", wantPort))
			if v := value(t, pts, "db.client.operation.duration", "s", append(server, attribute.String("error.type", "22012"), attribute.String("db.response.status_code", "22012"))...); v != 1 {
				t.Errorf("failed calls with error.type 22012: %d, want 1", v)
			}
			var ok int64
			for _, p := range pts["db.client.operation.duration"] {
				if !p.attrs.HasValue("error.type") {
					ok += p.value
				}
			}
			if ok == 0 {
				t.Error("no successful call recorded")
			}
			checkNoCredentials(t, everyAttribute(t, reader), user, password)
		})
	}
}

// TestServerAttrsReadOnlyTheHost: the server's attributes come from the DSN's first host and
// its port in every DSN form of the drivers gated knows, and never from its user, password or
// any other keyword, also when a password looks like a host.
func TestServerAttrsReadOnlyTheHost(t *testing.T) {
	for _, tc := range []struct {
		driver, dsn, system, host string
		port                      int // 0: none
	}{
		{"pgx", "postgres://alice:s3cret@db.example:6432/shop?sslmode=disable", "postgresql", "db.example", 6432},
		{"pgx", "postgresql://alice:s3cret@db.example/shop", "postgresql", "db.example", 5432},
		{"pgx", "postgres://alice:s3cret@db1.example:6001,db2.example:6002/shop", "postgresql", "db1.example", 6001},
		{"pgx", "postgres://alice:s3cret@[2001:db8::1]:6432/shop", "postgresql", "2001:db8::1", 6432},
		{"pgx", "postgres://alice:s3cret%2Fhost=evil@db.example/shop", "postgresql", "db.example", 5432},
		{"postgres", "host=db.example port=6543 user=alice password=s3cret dbname=shop", "postgresql", "db.example", 6543},
		{"postgres", "user=alice password='s3cret host=evil port=1' host = db.example", "postgresql", "db.example", 5432},
		{"postgres", `password=s3cret\ host=evil user=alice`, "postgresql", "", 0},
		{"pgx", "host=/var/run/postgresql user=alice password=s3cret", "postgresql", "/var/run/postgresql", 5432},
		{"pgx", "user=alice password='s3cret host=evil", "postgresql", "", 0},
		{"mysql", "alice:s3cret@tcp(db.example:3307)/test", "mysql", "db.example", 3307},
		{"mysql", "alice:s3c@ret/x@tcp(db.example)/test?parseTime=true", "mysql", "db.example", 3306},
		{"mysql", "alice:s3cret@unix(/run/mysqld/mysqld.sock)/test", "mysql", "/run/mysqld/mysqld.sock", 0},
		{"mysql", "alice:s3cret@/test", "mysql", "127.0.0.1", 3306},
		{"sqlite", "file:test.db", "other_sql", "", 0},
	} {
		kvs := serverAttrs(&gated.Config{Driver: tc.driver, DSN: tc.dsn})
		got := attribute.NewSet(kvs...)
		if v, _ := got.Value("db.system.name"); v.AsString() != tc.system {
			t.Errorf("%s %q: db.system.name %q, want %q", tc.driver, tc.dsn, v.AsString(), tc.system)
		}
		if v, _ := got.Value("server.address"); v.AsString() != tc.host {
			t.Errorf("%s %q: server.address %q, want %q", tc.driver, tc.dsn, v.AsString(), tc.host)
		}
		if v, _ := got.Value("server.port"); v.AsInt64() != int64(tc.port) {
			t.Errorf("%s %q: server.port %d, want %d", tc.driver, tc.dsn, v.AsInt64(), tc.port)
		}
		checkNoCredentials(t, kvs, "alice", "s3c")
		for _, kv := range kvs {
			if strings.Contains(kv.Value.Emit(), "evil") {
				t.Errorf("%s %q: %s = %q, read from the password", tc.driver, tc.dsn, kv.Key, kv.Value.Emit())
			}
		}
	}
}

// TestOperationDurationAllocatesNothingPerSuccessfulCall: recording a call that succeeded in
// both names allocates nothing.
func TestOperationDurationAllocatesNothingPerSuccessfulCall(t *testing.T) {
	t.Setenv(StabilityOptInEnv, "database/dup")
	_, c, _, _ := setup(t, "gate_max_conns=1")
	obs := c.Config().Observer.(*Observer)
	e := gated.Event{Kind: gated.EventStatement, Workload: "default", Context: context.Background()}
	obs.Observe(e)
	if a := testing.AllocsPerRun(1000, func() { obs.Observe(e) }); a != 0 {
		t.Errorf("Observe(EventStatement) allocates %v times", a)
	}
}
